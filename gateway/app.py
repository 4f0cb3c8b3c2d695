"""The aiohttp application: routes, middlewares (accounting, Anthropic-shaped errors), and what
starts and stops with it (the provider, reloaders, the fleet front door's routes).

:class:`gateway.server.Gateway` handles the requests; :func:`create_app` wires it into an app.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable

import orjson
from aiohttp import web

from gateway.accounting import accounting_middleware
from gateway.config import Settings
from gateway.drain import DRAIN_KEY
from gateway.egress import scrub
from gateway.errors import GatewayError, error_body
from gateway.fleet import signin
from gateway.fleet.policy_reload import PolicyReloader
from gateway.fleet.routes import FleetRoutes
from gateway.fleet.telemetry import fleet_metrics, install_telemetry
from gateway.key_reload import KeyReloader
from gateway.metrics import GatewayMetrics
from gateway.providers.base import Provider
from gateway.request_ids import new_request_id
from gateway.server import Gateway
from gateway.side_endpoints import SideEndpoints
from gateway.startup_summary import public_url

log = logging.getLogger("switchyard.server")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

SETTINGS_KEY = web.AppKey("settings", Settings)
PROVIDER_KEY = web.AppKey("provider", Provider)
METRICS_KEY = web.AppKey("metrics", GatewayMetrics)
KEY_RELOADER_KEY = web.AppKey("key_reloader", KeyReloader)  # set when GATEWAY_API_KEYS_FILE is
POLICY_RELOADER_KEY = web.AppKey("policy_reloader", PolicyReloader)  # set when GATEWAY_POLICY_FILE is
PROVIDERS_KEY = web.AppKey("providers", tuple[Provider, ...])  # every upstream's (SIGHUP re-reads key files)


def _json_error(status: int, error_type: str, message: str, **headers: str) -> web.Response:
    return web.Response(
        status=status,
        body=error_body(error_type, message),
        headers={"content-type": "application/json", **headers},
    )


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except GatewayError as exc:
        return web.Response(status=exc.status, body=exc.body(), headers=exc.response_headers())
    except web.HTTPNotFound:
        # the client's path and method are not echoed (a key pasted into a URL stays out of answers)
        return _json_error(404, "not_found_error", "no such endpoint")
    except web.HTTPMethodNotAllowed as exc:
        return _json_error(
            405,
            "invalid_request_error",
            "method not allowed on this endpoint",
            allow=", ".join(sorted(exc.allowed_methods)),
        )
    except web.HTTPRequestEntityTooLarge:
        return _json_error(413, "request_too_large", "Request exceeds the maximum allowed number of bytes.")
    except web.HTTPException as exc:
        return _json_error(exc.status, "invalid_request_error", exc.reason)
    except Exception as exc:
        # aiohttp would log the traceback with the exception's text (which may hold a proxy URL
        # with credentials) and answer text/plain: log it scrubbed, answer in the Anthropic shape
        trace = scrub("".join(traceback.format_exception(exc)))
        log.error("unhandled error on %s %s: %s", request.method, request.path, trace)
        return _json_error(500, "api_error", "internal gateway error")


def create_app(
    settings: Settings,
    provider: Provider | None = None,
    *,
    metrics: GatewayMetrics | None = None,
    request_id_factory: Callable[[], str] | None = None,
    clock: Callable[[], float] = time.monotonic,
    signin_clock: Callable[[], float] = time.time,
    wall_clock: Callable[[], float] = time.time,
) -> web.Application:
    """Build the aiohttp application. The provider is started and closed with the app.

    ``clock``: the monotonic seconds the gateway times requests and stream silences with (tests
    on a virtual-time event loop pass its ``loop.time``, the clock the watchdog's timers run on).
    ``signin_clock``: the wall clock of fleet sign-in (token and grant expiry); ``wall_clock``: the
    one of several upstreams' breakers and session placements.
    """
    upstream_providers: dict[str, Provider] | None = None
    if (
        settings.selection.upstreams_file is not None
    ):  # several upstreams (issue 18): the first is the default
        from gateway.upstreams import build_providers

        upstream_providers = build_providers(settings)
        provider = provider or next(iter(upstream_providers.values()))
    if provider is None:
        from gateway.providers.factory import build_provider

        provider = build_provider(settings)
    metrics = metrics or GatewayMetrics()
    gateway = Gateway(
        settings,
        provider,
        metrics,
        request_id_factory=request_id_factory or new_request_id,
        clock=clock,
        upstream_providers=upstream_providers,
        wall_clock=wall_clock,
    )

    listener = settings.listener
    accounting = accounting_middleware(
        gateway._close, gateway.new_request_id, gateway.clock, write_stall_s=listener.write_stall_timeout_s
    )
    app = web.Application(client_max_size=listener.max_body_bytes, middlewares=[accounting, error_middleware])
    app[SETTINGS_KEY] = settings
    app[PROVIDER_KEY] = provider
    app[METRICS_KEY] = metrics
    app[DRAIN_KEY] = gateway.drain
    if gateway.key_reloader is not None:
        reloader = gateway.key_reloader
        app[KEY_RELOADER_KEY] = reloader

        async def watch_keys(_: web.Application) -> AsyncIterator[None]:
            task = asyncio.create_task(reloader.run())
            yield
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

        app.cleanup_ctx.append(watch_keys)
    if isinstance(gateway.policy_gate.holder, PolicyReloader):
        policy_reloader = app[POLICY_RELOADER_KEY] = gateway.policy_gate.holder

        async def watch_policy(_: web.Application) -> AsyncIterator[None]:
            # the file, and the caps the admin API set on any replica (shared through Redis)
            sync_s = settings.policy.policy_reload_s or 5.0
            tasks = [policy_reloader.run(), gateway.policy_gate.run_cap_sync(sync_s)]
            running_tasks = [asyncio.create_task(task) for task in tasks]
            yield
            for task in running_tasks:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

        app.cleanup_ctx.append(watch_policy)
    enforced = settings.policy.policy_file is not None  # else the server never asks the policy
    FleetRoutes(gateway.policy_gate, gateway.auth.principal_for, gateway.auth.admin_for, enforced).add_to(app)
    app.router.add_post("/v1/messages", gateway.messages)
    app.router.add_post("/v1/messages/count_tokens", gateway.count_tokens)
    side = SideEndpoints(gateway)
    app.router.add_get("/v1/models", side.models)
    app.router.add_get("/v1/sessions/{session_id}", side.session)
    app.router.add_get("/healthz", side.healthz)
    app.router.add_get("/readyz", side.readyz)
    app.router.add_get("/metrics", side.metrics_endpoint)
    fleet = fleet_metrics(metrics.registry, settings.telemetry)
    holder = gateway.policy_gate.holder  # access tokens carry the groups its policy names
    signin.register(app, settings, gateway.auth, signin_clock, fleet.signed_in, lambda: holder.policy.named_groups)
    install_telemetry(app, settings, gateway.auth, metrics.registry)  # OTLP intake (issue 17)

    upstreams = gateway.upstreams
    named = {"": provider} if upstreams is None else {n: u.provider for n, u in upstreams.upstreams.items()}
    started = list(named.values())
    app[PROVIDERS_KEY] = tuple(started)

    async def start_provider(_: web.Application) -> None:
        for name, each in named.items():
            await each.start()
            facts = {key: public_url(value) or "" for key, value in each.describe().items()}
            facts = {"upstream": name, **facts} if name else facts
            log.info("provider ready: %s", orjson.dumps(facts).decode())  # no URL userinfo
        if upstreams is not None:
            upstreams.start_probe()

    async def close_provider(_: web.Application) -> None:
        for each in started:
            await each.close()
        if upstreams is not None:
            await upstreams.close()
        await gateway.cache.store.close()
        await gateway.policy_gate.counters.close()
        if gateway.redis_link is not None:  # after its users: their last writes go out first
            await gateway.redis_link.close()

    app.on_startup.append(start_provider)
    app.on_cleanup.append(close_provider)
    return app
