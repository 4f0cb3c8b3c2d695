"""Forwarding to OTLP collectors: real receiving HTTP servers on loopback.

The gateway forwards what the SDK's exporter sent (bytes and coding unchanged, the configured
headers added); a collector that fails trips its breaker after the configured failures and is
skipped (counted) until the open period passes on an injected clock; a collector that does not
answer holds at most the in-flight cap, the rest is dropped and counted; timeouts bound a stalled
one; logs never show the collector's credentials."""

from __future__ import annotations

import asyncio
import gzip
import logging
from pathlib import Path

import pytest
from aiohttp import web
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from prometheus_client import CollectorRegistry

from gateway.fleet.fleet_labels import GroupLabels
from gateway.fleet.fleet_metrics import FleetMetrics
from gateway.fleet.otlp_forward import OtlpForwarder, destination_label, parse_headers
from gateway.fleet.otlp_signals import Signal
from tests.fleet.collector import collector
from tests.fleet.otlp_client import Activity, Recorder, export_protobuf
from tests.fleet.telemetry_rig import ALPHA_KEY, telemetry_rig

pytestmark = pytest.mark.timeout(60)

COLLECTOR_TOKEN = "collector-token-5ec2e7"


async def test_the_gateway_forwards_exports_as_sent(tmp_path: Path) -> None:
    async with collector() as one, collector() as two:
        env = {
            "GATEWAY_OTLP_FORWARD_URLS": f"{one.url},{two.url}/otlp/",
            "GATEWAY_OTLP_FORWARD_HEADERS": f"Authorization=Bearer%20{COLLECTOR_TOKEN},X-Scope-OrgID=fleet",
        }
        async with telemetry_rig(tmp_path, env) as rig:
            data = Recorder().record(Activity())
            assert await asyncio.to_thread(
                export_protobuf, f"{rig.base_url}/v1/metrics", data, ALPHA_KEY, gzip=True
            )
            await asyncio.wait_for(asyncio.gather(one.arrived.wait(), two.arrived.wait()), 10)
            assert [r.path for r in one.received] == ["/v1/metrics"]
            assert [r.path for r in two.received] == ["/otlp/v1/metrics"]
            for got in (one.received[0], two.received[0]):
                assert got.headers["Content-Encoding"] == "gzip"  # forwarded still compressed
                assert got.headers["Content-Type"] == "application/x-protobuf"
                assert got.headers["Authorization"] == f"Bearer {COLLECTOR_TOKEN}"
                assert got.headers["X-Scope-OrgID"] == "fleet"
                assert ALPHA_KEY not in str(got.headers)  # the client's own key stays here
                request = ExportMetricsServiceRequest.FromString(gzip.decompress(got.body))
                names = {
                    m.name for rm in request.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
                }
                assert "claude_code.cost.usage" in names
            for destination in (destination_label(one.url), destination_label(two.url)):
                labels = {"destination": destination, "signal": "metrics", "outcome": "delivered"}
                deadline = asyncio.get_running_loop().time() + 5
                while rig.value("gateway_fleet_otlp_forward_total", **labels) < 1:  # counted after the answer
                    assert asyncio.get_running_loop().time() < deadline
                    await asyncio.sleep(0.01)
            # the series were recorded as well
            assert rig.value("gateway_fleet_sessions_total", group="alpha") == 1


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def forwarder_for(url: str, clock: Clock, **kwargs: float) -> tuple[OtlpForwarder, FleetMetrics]:
    metrics = FleetMetrics(CollectorRegistry(), groups=GroupLabels((), 10), top_users=5)
    options = {"timeout_s": 5.0, "max_inflight": 128, "breaker_failures": 5, "breaker_open_s": 30.0, **kwargs}
    forwarder = OtlpForwarder(
        (url,),
        metrics,
        headers=parse_headers(f"authorization=Bearer%20{COLLECTOR_TOKEN}"),
        timeout_s=options["timeout_s"],
        max_inflight=int(options["max_inflight"]),
        breaker_failures=int(options["breaker_failures"]),
        breaker_open_s=options["breaker_open_s"],
        clock=clock,
    )
    return forwarder, metrics


def count(metrics: FleetMetrics, url: str, outcome: str) -> float:
    labels = {"destination": destination_label(url), "signal": "metrics", "outcome": outcome}
    return metrics.forwarded.labels(*labels.values())._value.get()


async def settle(forwarder: OtlpForwarder) -> None:
    tasks = {task for destination in forwarder.destinations for task in destination.tasks}
    if tasks:
        await asyncio.wait(tasks, timeout=10)


async def test_a_failing_collector_trips_its_breaker(caplog: pytest.LogCaptureFixture) -> None:
    failing = True

    async def answer(request: web.Request) -> web.Response:
        return web.Response(status=503 if failing else 200)

    clock = Clock()
    async with collector(answer) as sink:
        url = sink.url
        forwarder, metrics = forwarder_for(url, clock)
        await forwarder.start()
        try:
            with caplog.at_level(logging.WARNING, logger="switchyard.fleet.otlp_forward"):
                for _ in range(5):  # one at a time: five consecutive failures
                    forwarder.submit(Signal.METRICS, b"\x0a\x00", "application/x-protobuf", None)
                    await settle(forwarder)
            assert count(metrics, url, "failed") == 5
            assert len(sink.received) == 5
            assert metrics.breaker_open.labels(destination_label(url))._value.get() == 1
            # open: the next exports are not sent, only counted
            for _ in range(3):
                forwarder.submit(Signal.METRICS, b"\x0a\x00", "application/x-protobuf", None)
            await settle(forwarder)
            assert count(metrics, url, "dropped_breaker_open") == 3 and len(sink.received) == 5
            clock.now += 29.9
            forwarder.submit(Signal.METRICS, b"\x0a\x00", "application/x-protobuf", None)
            assert count(metrics, url, "dropped_breaker_open") == 4
            # the open period over: tried again; one more failure opens it again at once
            clock.now += 0.2
            forwarder.submit(Signal.METRICS, b"\x0a\x00", "application/x-protobuf", None)
            await settle(forwarder)
            assert len(sink.received) == 6 and count(metrics, url, "failed") == 6
            forwarder.submit(Signal.METRICS, b"\x0a\x00", "application/x-protobuf", None)
            assert count(metrics, url, "dropped_breaker_open") == 5
            # a delivery closes it
            clock.now += 31
            failing = False
            forwarder.submit(Signal.METRICS, b"\x0a\x00", "application/x-protobuf", None)
            await settle(forwarder)
            assert count(metrics, url, "delivered") == 1
            assert metrics.breaker_open.labels(destination_label(url))._value.get() == 0
            assert forwarder.destinations[0].breaker.failures == 0
        finally:
            await forwarder.close()
    logged = caplog.text
    assert "failed 5 times in a row" in logged and destination_label(url) in logged
    assert COLLECTOR_TOKEN not in logged
    assert all(r.headers["authorization"] == f"Bearer {COLLECTOR_TOKEN}" for r in sink.received)


async def test_refused_payloads_do_not_trip_the_breaker() -> None:
    async def answer(request: web.Request) -> web.Response:
        return web.Response(status=400)

    async with collector(answer) as sink:
        forwarder, metrics = forwarder_for(sink.url, Clock(), breaker_failures=2)
        await forwarder.start()
        try:
            for _ in range(4):
                forwarder.submit(Signal.METRICS, b"x", "application/x-protobuf", None)
                await settle(forwarder)
        finally:
            await forwarder.close()
        assert count(metrics, sink.url, "refused") == 4
        assert count(metrics, sink.url, "dropped_breaker_open") == 0 and len(sink.received) == 4


async def test_in_flight_cap_and_timeouts_bound_a_stalled_collector() -> None:
    release = asyncio.Event()

    async def answer(request: web.Request) -> web.Response:
        await release.wait()
        return web.Response()

    async with collector(answer) as sink:
        forwarder, metrics = forwarder_for(sink.url, Clock(), max_inflight=2, timeout_s=0.5)
        await forwarder.start()
        try:
            for _ in range(5):
                forwarder.submit(Signal.METRICS, b"x", "application/x-protobuf", None)
            # two in flight, three dropped at once (the answer to the client never waits)
            assert count(metrics, sink.url, "dropped_queue_full") == 3
            assert metrics.forward_inflight.labels(destination_label(sink.url))._value.get() == 2
            started = asyncio.get_running_loop().time()
            await settle(forwarder)  # the stalled collector: each send ends at its timeout
            elapsed = asyncio.get_running_loop().time() - started
            assert count(metrics, sink.url, "failed") == 2 and elapsed < 5
            assert metrics.forward_inflight.labels(destination_label(sink.url))._value.get() == 0
        finally:
            release.set()
            await forwarder.close()


async def test_a_collectors_cookie_is_not_sent_with_later_exports() -> None:
    # one session forwards every tenant's exports: a cookie set on one answer must not be replayed
    # (reached as ``localhost``: aiohttp's default jar keeps a host name's cookies, not an IP's)
    async def answer(request: web.Request) -> web.Response:
        response = web.Response()
        response.set_cookie("route", "collector-7")
        return response

    async with collector(answer) as sink:
        url = sink.url.replace("127.0.0.1", "localhost")
        forwarder, metrics = forwarder_for(url, Clock())
        await forwarder.start()
        try:
            for _ in range(2):
                forwarder.submit(Signal.METRICS, b"\x0a\x00", "application/x-protobuf", None)
                await settle(forwarder)
            assert count(metrics, url, "delivered") == 2
            assert [r.headers.get("cookie") for r in sink.received] == [None, None]
        finally:
            await forwarder.close()


def test_header_syntax_and_labels() -> None:
    assert parse_headers("a=1, B = x%20y ,") == {"a": "1", "B": "x y"}
    with pytest.raises(ValueError) as info:
        parse_headers("just-a-secret-value")
    assert "just-a-secret-value" not in str(info.value)
    assert destination_label("https://user:pw@otel.example:4318/base") == "otel.example:4318"
    assert destination_label("http://[::1]/x") == "[::1]:80"
