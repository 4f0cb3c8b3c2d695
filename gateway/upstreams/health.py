"""Upstream health: passive (from real traffic) and an optional active probe.

Passive: an exponentially weighted error rate per upstream (each request's outcome moves it by
``ALPHA``). ``gateway_upstream_health`` is 1 while the upstream's breaker is closed and its error
rate is under ``UNHEALTHY_ERROR_RATE``, else 0. Latency: ``gateway_upstream_latency_seconds``.

Active (``probe.interval_s`` > 0): every interval, each upstream gets a ``count_tokens`` request for
a one-word prompt, taking a half-open probe slot like a request (no load on an open circuit). An
answer below 500 (429 excepted) is a success for its breaker (closing a half-open one), any other a
failure; one that cannot count for the probed model (refused before sending: a model it does not
serve, an inference profile) gives no verdict: the slot is given back, with one warning.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Final

import orjson
from aiohttp import web

from gateway.errors import ClientInputError, GatewayError
from gateway.providers.base import ClientRequest, Operation, PreparedRequest, Provider
from gateway.upstreams.breaker import BreakerBoard, BreakerState
from gateway.upstreams.metrics import UpstreamMetrics
from gateway.upstreams.upstream import Upstream

log = logging.getLogger("switchyard.upstreams.health")

ALPHA: Final = 0.2
UNHEALTHY_ERROR_RATE: Final = 0.5


class PassiveHealth:
    def __init__(self, metrics: UpstreamMetrics, breakers: BreakerBoard) -> None:
        self._metrics = metrics
        self._breakers = breakers
        self.error_rate: dict[str, float] = dict.fromkeys(metrics.names, 0.0)

    def observe(self, name: str, *, ok: bool) -> None:
        rate = self.error_rate[name] = (1 - ALPHA) * self.error_rate[name] + ALPHA * (0.0 if ok else 1.0)
        healthy = rate < UNHEALTHY_ERROR_RATE and self._breakers.state(name) is BreakerState.CLOSED
        self._metrics.health.labels(name).set(1 if healthy else 0)


def probe_request(model: str) -> ClientRequest:
    payload = {"model": model, "messages": [{"role": "user", "content": "ping"}]}
    headers = [("content-type", "application/json"), ("anthropic-version", "2023-06-01")]
    return ClientRequest(
        Operation.COUNT_TOKENS, orjson.dumps(payload), payload, headers, f"req_probe_{uuid.uuid4().hex[:16]}"
    )


class ActiveProbe:
    """The background task: probe every upstream each ``interval_s`` seconds."""

    def __init__(
        self,
        upstreams: dict[str, Provider],
        breakers: BreakerBoard,
        health: PassiveHealth,
        *,
        model: str,
        interval_s: float,
        timeout_s: float,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._upstreams = upstreams
        self._breakers = breakers
        self._health = health
        self._model = model
        self._interval_s = interval_s
        self._timeout_s = timeout_s
        self._sleep = sleep
        self._unprobed: set[str] = set()  # upstreams warned about: they cannot count for the model

    async def probe(self, name: str) -> bool | None:
        """Probe one upstream; ``None`` when its breaker gave no probe slot or it cannot count
        for the probed model."""
        await self._breakers.sync()
        if not await self._breakers.acquire(name):
            return None
        provider = self._upstreams[name]
        ok = False
        try:
            prepared: PreparedRequest = provider.prepare(probe_request(self._model))
            if prepared.unsupported is not None:  # answered without asking (an inference profile)
                raise ClientInputError(501, prepared.unsupported)
            async with asyncio.timeout(self._timeout_s):
                response = await provider.count_tokens(prepared)
            ok = response.status < 500 and response.status not in (429,)
            response.close()
        except ClientInputError as exc:  # it cannot count for this model: no word on its health
            self._breakers.release(name)
            if name not in self._unprobed:
                self._unprobed.add(name)
                log.warning(
                    "the probe cannot check upstream %s with model %s (%s %s): set probe.model to a "
                    "model every upstream serves",
                    name,
                    self._model,
                    exc.status,
                    exc.message,
                )
            return None
        except (GatewayError, TimeoutError, OSError) as exc:
            log.info("probe of upstream %s failed: %s", name, type(exc).__name__)
        if ok:
            await self._breakers.success(name)
        else:
            await self._breakers.failure(name)
        self._health.observe(name, ok=ok)
        return ok

    async def run(self) -> None:
        while True:
            await self._sleep(self._interval_s)
            for name in self._upstreams:
                with contextlib.suppress(Exception):
                    await self.probe(name)



async def readiness(upstreams: Mapping[str, Upstream], breakers: BreakerBoard) -> web.Response:
    """``/readyz``: ready while one upstream can serve (credentials present, breaker not open)."""
    reasons: dict[str, str] = {}
    for name, upstream in upstreams.items():
        reason = await upstream.provider.readiness()
        if reason is None and not breakers.available(name):
            reason = "circuit breaker open"
        if reason is None:
            return web.json_response({"status": "ready", "provider": upstream.kind.value, "upstream": name})
        reasons[name] = reason
    return web.json_response({"status": "not ready", "reason": reasons}, status=503)
