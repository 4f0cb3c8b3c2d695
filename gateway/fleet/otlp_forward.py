"""Sending accepted OTLP exports on to the operator's collectors (``GATEWAY_OTLP_FORWARD_URLS``).

Forwarding never delays the client's answer and never holds unbounded memory (bounded in-flight
exports and a breaker per destination). Logs name a destination by ``host:port`` only.

Details: docs/internals/gateway-fleet.md
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import unquote, urlsplit

import aiohttp

from gateway.fleet.fleet_metrics import FleetMetrics
from gateway.fleet.otlp_signals import Signal

log = logging.getLogger("switchyard.fleet.otlp_forward")

REFUSED_STATUSES: Final = frozenset({400, 413, 415, 422, 431})


def destination_label(url: str) -> str:
    """``host:port`` of a collector URL: its metric label and its name in logs."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    host = parts.hostname or "unknown"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def parse_headers(text: str) -> dict[str, str]:
    """``OTEL_EXPORTER_OTLP_HEADERS`` syntax: ``key=value`` pairs separated by commas, values
    percent-decoded (the OpenTelemetry specification's W3C-baggage-like form)."""
    headers: dict[str, str] = {}
    for item in text.split(","):
        if not item.strip():
            continue
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ValueError("expected key=value pairs separated by commas (the value is not shown)")
        headers[name.strip()] = unquote(value.strip())
    return headers


class Breaker:
    """Consecutive failures of one destination; open (refusing) for ``open_s`` after ``threshold``."""

    def __init__(self, threshold: int, open_s: float, clock: Callable[[], float]) -> None:
        self.threshold = threshold
        self.open_s = open_s
        self._clock = clock
        self.failures = 0
        self.open_until = 0.0

    def allows(self) -> bool:
        return self._clock() >= self.open_until

    def failed(self) -> bool:
        """One failure; True when it opened the breaker."""
        self.failures += 1
        if self.failures >= self.threshold:
            self.open_until = self._clock() + self.open_s
            return True
        return False

    def delivered(self) -> None:
        self.failures = 0
        self.open_until = 0.0


@dataclass(eq=False)
class Destination:
    base_url: str
    label: str
    breaker: Breaker
    inflight: int = 0
    tasks: set[asyncio.Task[None]] = field(default_factory=set)


class OtlpForwarder:
    def __init__(
        self,
        urls: tuple[str, ...],
        metrics: FleetMetrics,
        *,
        headers: Mapping[str, str] | None = None,
        timeout_s: float = 10.0,
        max_inflight: int = 128,
        breaker_failures: int = 5,
        breaker_open_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.metrics = metrics
        self.headers = dict(headers or {})
        self.timeout = aiohttp.ClientTimeout(
            total=timeout_s, connect=timeout_s, sock_connect=timeout_s, sock_read=timeout_s
        )
        self.max_inflight = max_inflight
        self.destinations = [
            Destination(
                url.rstrip("/"), destination_label(url), Breaker(breaker_failures, breaker_open_s, clock)
            )
            for url in urls
        ]
        self._session: aiohttp.ClientSession | None = None
        for destination in self.destinations:
            metrics.prime_destination(destination.label)

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(limit=max(1, self.max_inflight * len(self.destinations)))
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=self.timeout,
            trust_env=False,
            auto_decompress=False,
            cookie_jar=aiohttp.DummyCookieJar(),  # every tenant's exports: no collector cookie is kept
        )

    async def close(self, grace_s: float = 2.0) -> None:
        """Let exports in flight finish for up to ``grace_s``, cancel the rest, close the session."""
        tasks = {task for destination in self.destinations for task in destination.tasks}
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=grace_s)
            for task in pending:
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(*pending, return_exceptions=True)
        if self._session is not None:
            await self._session.close()
            self._session = None

    def submit(self, signal: Signal, body: bytes, content_type: str, content_encoding: str | None) -> None:
        """Start sending one export to every destination (returns at once)."""
        session = self._session
        if session is None:
            return
        headers = {"content-type": content_type, **self.headers}
        if content_encoding:
            headers["content-encoding"] = content_encoding
        for destination in self.destinations:
            if not destination.breaker.allows():
                self._count(destination, signal, "dropped_breaker_open")
                continue
            if destination.inflight >= self.max_inflight:
                self._count(destination, signal, "dropped_queue_full")
                continue
            destination.inflight += 1
            self.metrics.forward_inflight.labels(destination.label).inc()
            task = asyncio.create_task(self._send(session, destination, signal, body, headers))
            destination.tasks.add(task)
            task.add_done_callback(destination.tasks.discard)

    async def _send(
        self,
        session: aiohttp.ClientSession,
        destination: Destination,
        signal: Signal,
        body: bytes,
        headers: dict[str, str],
    ) -> None:
        url = f"{destination.base_url}/v1/{signal.value}"
        outcome = "failed"
        failure = ""
        try:
            async with session.post(url, data=body, headers=headers, allow_redirects=False) as response:
                await response.content.readany()  # the answer is not used: read a little, then drop it
                if 200 <= response.status < 300:
                    outcome = "delivered"
                elif response.status in REFUSED_STATUSES:
                    outcome = "refused"
                else:
                    failure = f"status {response.status}"
        except Exception as exc:  # ClientError, TimeoutError, OSError, ValueError (aiohttp's own checks)...
            failure = type(exc).__name__  # the class only: a message may hold the URL
        finally:
            destination.inflight -= 1
            self.metrics.forward_inflight.labels(destination.label).dec()
        self._settle(destination, signal, outcome, failure)

    def _settle(self, destination: Destination, signal: Signal, outcome: str, failure: str) -> None:
        breaker = destination.breaker
        if outcome == "delivered":
            breaker.delivered()
            self.metrics.breaker_open.labels(destination.label).set(0)
        elif outcome == "failed":
            was_open = not breaker.allows()
            if breaker.failed():
                self.metrics.breaker_open.labels(destination.label).set(1)
                if not was_open:
                    log.warning(
                        "OTLP collector %s failed %d times in a row (%s): not forwarding to it for %.0f s",
                        destination.label, breaker.failures, failure, breaker.open_s,
                    )  # fmt: skip
        self._count(destination, signal, outcome)

    def _count(self, destination: Destination, signal: Signal, outcome: str) -> None:
        self.metrics.forwarded.labels(destination.label, signal.value, outcome).inc()
