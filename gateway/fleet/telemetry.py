"""Wiring the fleet telemetry into an app: ``install_telemetry`` (one call in ``create_app``).

It always makes the registry's :class:`~gateway.fleet.fleet_metrics.FleetMetrics` (the sign-in and
policy counters live there too). The OTLP intake needs ``opentelemetry-proto`` (the ``fleet``
extra): with it, ``POST /v1/metrics``, ``/v1/logs`` and ``/v1/traces`` are routed to
:class:`~gateway.fleet.otlp_intake.TelemetryIntake` and the forwarder (``GATEWAY_OTLP_FORWARD_URLS``)
starts and stops with the app (the intake itself, and protobuf, load on the first export); without it, start-up logs a warning and the paths stay unrouted
(the gateway protocol lists them as optional).
"""

from __future__ import annotations

import importlib.util
import logging
import weakref
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Final

from aiohttp import web
from prometheus_client import CollectorRegistry

from gateway.config import Settings
from gateway.fleet.fleet_labels import GroupLabels
from gateway.fleet.fleet_metrics import FleetMetrics
from gateway.fleet.otlp_signals import PATHS
from gateway.inbound import Authenticator
from gateway.settings.fleet_telemetry import TelemetrySettings

if TYPE_CHECKING:
    from gateway.fleet.otlp_forward import OtlpForwarder
    from gateway.fleet.otlp_intake import TelemetryIntake

log = logging.getLogger("switchyard.fleet.telemetry")

FLEET_METRICS_KEY: Final = web.AppKey("fleet_metrics", FleetMetrics)

# one FleetMetrics per registry: several apps may share one registry (one process, one /metrics)
_BY_REGISTRY: weakref.WeakKeyDictionary[CollectorRegistry, FleetMetrics] = weakref.WeakKeyDictionary()


def intake_available() -> bool:
    """Whether ``opentelemetry-proto`` is installed, without importing ``opentelemetry`` (a dotted
    ``find_spec`` would import the parent package): its ``proto`` package in one of its folders."""
    try:
        spec = importlib.util.find_spec("opentelemetry")
    except ModuleNotFoundError:  # an import hook that hides it
        return False
    if spec is None:
        return False
    folders = spec.submodule_search_locations or ()
    return any(Path(folder, "proto", "__init__.py").is_file() for folder in folders)


def fleet_metrics(registry: CollectorRegistry, settings: TelemetrySettings) -> FleetMetrics:
    """The registry's ``FleetMetrics`` (made on first use, with ``settings``' label bounds)."""
    metrics = _BY_REGISTRY.get(registry)
    if metrics is None:
        groups = GroupLabels(settings.telemetry_groups, settings.telemetry_max_groups)
        metrics = _BY_REGISTRY[registry] = FleetMetrics(
            registry, groups=groups, top_users=settings.telemetry_top_users
        )
    return metrics


def install_telemetry(
    app: web.Application, settings: Settings, auth: Authenticator, registry: CollectorRegistry
) -> FleetMetrics:
    """Route the three OTLP paths to the intake; start and stop the forwarder with the app."""
    metrics = fleet_metrics(registry, settings.telemetry)
    app[FLEET_METRICS_KEY] = metrics
    if not intake_available():
        log.warning("OTLP intake off: opentelemetry-proto is not installed (pip install 'switchyard[fleet]')")
        return metrics
    forwarder = None
    if settings.telemetry.otlp_forward_urls:  # the forwarder's module only when it forwards
        from gateway.fleet.otlp_forward import OtlpForwarder, parse_headers

        forwarder = OtlpForwarder(
            settings.telemetry.otlp_forward_urls,
            metrics,
            headers=parse_headers(settings.telemetry.otlp_forward_headers.get_secret_value()),
            timeout_s=settings.telemetry.otlp_forward_timeout_s,
            max_inflight=settings.telemetry.otlp_forward_max_inflight,
            breaker_failures=settings.telemetry.otlp_forward_breaker_failures,
            breaker_open_s=settings.telemetry.otlp_forward_breaker_open_s,
        )

        async def forwarding(_: web.Application) -> AsyncIterator[None]:
            await forwarder.start()
            yield
            await forwarder.close()

        app.cleanup_ctx.append(forwarding)
    intake = _OnFirstUse(settings, auth, metrics, forwarder)
    for path in PATHS:
        app.router.add_post(path, intake.handle)
    return metrics


class _OnFirstUse:
    """The intake, made (and protobuf imported) on the first export: a gateway whose clients send
    no telemetry loads no protobuf (start-up time and memory; ``tests/unit/test_import_hygiene``)."""

    def __init__(
        self, settings: Settings, auth: Authenticator, metrics: FleetMetrics, forwarder: OtlpForwarder | None
    ) -> None:
        self._parts = (settings, auth, metrics, forwarder)
        self._intake: TelemetryIntake | None = None

    async def handle(self, request: web.Request) -> web.Response:
        intake = self._intake
        if intake is None:
            from gateway.fleet.otlp_intake import TelemetryIntake

            intake = self._intake = TelemetryIntake(*self._parts)
        return await intake.handle(request)
