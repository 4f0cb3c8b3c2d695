"""The OTLP intake with real OTLP clients: the OpenTelemetry SDK's exporters (protobuf, gzip) and
OTLP JSON of the SDK's own encoding, against a gateway on loopback. Claude Code's metrics become
``gateway_fleet_*`` series labelled by the authenticated caller's group; garbage is answered 200
and counted; a caller without a valid key gets the protocol's 401."""

from __future__ import annotations

import asyncio
import gzip
import os
import zlib
from collections.abc import Mapping
from pathlib import Path

import aiohttp
import pytest
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceResponse
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from tests.fleet.otlp_client import Activity, Recorder, expected_series, export_protobuf, otlp_json
from tests.fleet.telemetry_rig import ALPHA_KEY, BETA_KEY, METRICS_KEY, TelemetryRig, telemetry_rig

pytestmark = pytest.mark.timeout(60)


def assert_series(rig: TelemetryRig, group: str, activity: Activity, times: int = 1) -> None:
    label_names = {
        "gateway_fleet_cost_usd_total": ("model",),
        "gateway_fleet_tokens_total": ("model", "type"),
        "gateway_fleet_lines_of_code_total": ("type",),
        "gateway_fleet_active_time_seconds_total": ("type",),
        "gateway_fleet_code_edit_decisions_total": ("tool", "decision"),
    }
    for (name, values), want in expected_series(activity, times).items():
        labels = dict(zip(label_names.get(name, ()), values, strict=True))
        assert rig.value(name, group=group, **labels) == pytest.approx(want), (name, labels)


async def post(
    rig: TelemetryRig, path: str, body: bytes, content_type: str, key: str | None = ALPHA_KEY, **headers: str
) -> tuple[int, bytes, Mapping[str, str]]:
    if key is not None:
        headers["authorization"] = f"Bearer {key}"
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{rig.base_url}{path}", data=body, headers={"content-type": content_type, **headers}
        ) as r,
    ):
        return r.status, await r.read(), r.headers.copy()


async def test_protobuf_and_gzip_exports_become_group_series(tmp_path: Path) -> None:
    async with telemetry_rig(tmp_path) as rig:
        activity = Activity()
        recorder = Recorder()
        endpoint = f"{rig.base_url}/v1/metrics"
        assert await asyncio.to_thread(export_protobuf, endpoint, recorder.record(activity), ALPHA_KEY)
        rig.metrics.exposition()  # a scrape between the exports
        assert await asyncio.to_thread(
            export_protobuf, endpoint, recorder.record(activity), ALPHA_KEY, gzip=True
        )
        assert_series(rig, "alpha", activity, times=2)  # delta points: each export adds its own
        assert rig.value("gateway_fleet_sessions_total", group="beta") == 0
        # the authenticated caller is the user, whatever user.email the client wrote
        # (the first export earned the label and counts under other; after a scrape saw the new
        # series at zero, the second counts under the label)
        assert rig.value("gateway_fleet_user_cost_usd_total", user="key:alpha") == pytest.approx(0.26)
        assert rig.value("gateway_fleet_user_cost_usd_total", user="other") == pytest.approx(0.26)
        users = {dict(k)["user"] for k in rig.samples("gateway_fleet_user_cost_usd_total")}
        assert users == {"key:alpha", "other"}
        assert rig.value("gateway_fleet_active_users", group="alpha") == 1
        assert rig.value("gateway_fleet_telemetry_exports_total", signal="metrics") == 2
        # the unrelated library's counter is received, not recorded
        recorded = rig.value("gateway_fleet_telemetry_points_recorded_total")
        assert rig.value("gateway_fleet_telemetry_items_total", signal="metrics") == recorded + 2
        # no attribute besides the bounded ones became a label
        exposition = rig.metrics.exposition().decode()
        for leaked in ("session-1", "someone-else", "Go", "config"):
            assert f'"{leaked}"' not in exposition


async def test_otlp_json_and_cumulative_temporality(tmp_path: Path) -> None:
    async with telemetry_rig(tmp_path) as rig:
        activity = Activity()
        recorder = Recorder(cumulative=True)
        first = otlp_json(recorder.record(activity))
        second = otlp_json(recorder.record(activity))  # cumulative: twice the first values
        assert b'"aggregationTemporality": 2' in first
        status, body, headers = await post(rig, "/v1/metrics", first, "application/json")
        assert (status, headers["content-type"].split(";")[0], body) == (200, "application/json", b"{}")
        compressed = gzip.compress(second)
        status, _, _ = await post(
            rig, "/v1/metrics", compressed, "application/json", key=BETA_KEY, **{"content-encoding": "gzip"}
        )
        assert status == 200
        assert_series(rig, "alpha", activity)
        # beta's stream is new to the gateway: its cumulative value counts whole
        assert_series(rig, "beta", activity, times=2)
        # and alpha sending the same cumulative stream again adds only the difference
        status, _, _ = await post(rig, "/v1/metrics", second, "application/json")
        assert_series(rig, "alpha", activity, times=2)


async def test_garbage_is_answered_200_and_counted(tmp_path: Path) -> None:
    limit = 64 * 1024
    async with telemetry_rig(tmp_path, {"GATEWAY_TELEMETRY_MAX_BODY_BYTES": str(limit)}) as rig:
        protobuf = "application/x-protobuf"
        cases = [
            ("/v1/metrics", b"\xff\x00garbage" * 10, protobuf, {}, "decode"),
            ("/v1/metrics", b"{not json", "application/json", {}, "decode"),
            ("/v1/logs", b"[1, 2]", "application/json", {}, "decode"),
            ("/v1/traces", b"hello", "text/plain", {}, "content_type"),
            ("/v1/metrics", os.urandom(limit + 1), protobuf, {}, "too_large"),
            # a zip bomb: 1 GiB of zeros compresses to ~1 MiB; refused after a bounded amount of work
            ("/v1/metrics", zlib.compress(b"\0" * (64 << 20), 9)[:60000], protobuf,
             {"content-encoding": "deflate"}, "too_large"),
            ("/v1/metrics", gzip.compress(b"\x0a\x00" * 100)[:-6], protobuf, {"content-encoding": "gzip"},
             "encoding"),
            ("/v1/metrics", b"x", protobuf, {"content-encoding": "br"}, "encoding"),
            # integers a str.isdigit() check took: int() and float() raised on the request path
            *[("/v1/metrics", b'{"resourceMetrics": [{"scopeMetrics": [{"metrics": [{"name": "x", "sum": '
               b'{"dataPoints": [{"asInt": "' + value.encode() + b'"}]}}]}]}]}', "application/json", {},
               "decode") for value in ("²", "--5", "9" * 5000, "1" + "0" * 400)],
        ]  # fmt: skip
        for path, body, content_type, headers, reason in cases:
            signal = path.rsplit("/", 1)[1]
            before = rig.value("gateway_fleet_telemetry_rejected_total", signal=signal, reason=reason)
            status, answer, answer_headers = await post(rig, path, body, content_type, **headers)
            assert status == 200, (reason, answer)
            after = rig.value("gateway_fleet_telemetry_rejected_total", signal=signal, reason=reason)
            assert after == before + 1, reason
            if content_type == protobuf:
                parsed = ExportMetricsServiceResponse.FromString(answer)
                assert parsed.partial_success.error_message == f"export not accepted: {reason}"
            else:
                assert answer_headers["content-type"].startswith("application/json")
                assert reason.encode() in answer
        assert sum(rig.samples("gateway_fleet_telemetry_rejected_total").values()) == len(cases)
        assert rig.value("gateway_fleet_telemetry_exports_total", signal="metrics") == 0
        # the connection is still good for the next export
        recorder = Recorder()
        data = recorder.record(Activity())
        assert await asyncio.to_thread(export_protobuf, f"{rig.base_url}/v1/metrics", data, ALPHA_KEY)


async def test_callers_without_a_client_key_are_refused(tmp_path: Path) -> None:
    async with telemetry_rig(tmp_path) as rig:
        body = otlp_json(Recorder().record(Activity()))
        for key, status, kind in (
            (None, 401, "authentication_error"),
            ("sk-not-a-key", 401, "authentication_error"),
            (METRICS_KEY, 403, "permission_error"),
        ):
            got, answer, headers = await post(rig, "/v1/metrics", body, "application/json", key=key)
            assert got == status and kind.encode() in answer
            assert headers["x-should-retry"] == "false"
        assert (
            rig.value("gateway_fleet_telemetry_rejected_total", signal="metrics", reason="unauthenticated")
            == 3
        )
        assert rig.value("gateway_fleet_sessions_total", group="alpha") == 0
        # the exporter itself sees a failure it reports (a 401 is not retried by it)
        exporter_ok = await asyncio.to_thread(
            export_protobuf, f"{rig.base_url}/v1/metrics", Recorder().record(Activity()), "sk-wrong"
        )
        assert not exporter_ok


async def test_logs_and_traces_from_the_sdk_exporters(tmp_path: Path) -> None:
    async with telemetry_rig(tmp_path) as rig:
        headers = {"Authorization": f"Bearer {BETA_KEY}"}

        def spans() -> None:
            exporter = OTLPSpanExporter(
                endpoint=f"{rig.base_url}/v1/traces",
                headers=headers,
                compression=Compression.Gzip,
                timeout=10,
            )
            provider = TracerProvider()
            provider.add_span_processor(SimpleSpanProcessor(exporter))
            tracer = provider.get_tracer("claude_code")
            with tracer.start_as_current_span("claude_code.interaction"), tracer.start_as_current_span("llm"):
                pass
            provider.shutdown()

        def logs() -> bool:
            from opentelemetry.sdk._logs import LoggerProvider
            from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor

            memory = InMemoryLogRecordExporter()
            provider = LoggerProvider()
            provider.add_log_record_processor(SimpleLogRecordProcessor(memory))
            logger = provider.get_logger("com.anthropic.claude_code.events")
            for name in ("claude_code.user_prompt", "claude_code.api_request", "claude_code.tool_result"):
                logger.emit(body=name, attributes={"event.name": name})
            exporter = OTLPLogExporter(endpoint=f"{rig.base_url}/v1/logs", headers=headers, timeout=10)
            try:
                return exporter.export(memory.get_finished_logs()).name == "SUCCESS"
            finally:
                exporter.shutdown()

        await asyncio.to_thread(spans)
        assert await asyncio.to_thread(logs)
        assert rig.value("gateway_fleet_telemetry_exports_total", signal="traces") == 2
        assert rig.value("gateway_fleet_telemetry_items_total", signal="traces") == 2
        assert rig.value("gateway_fleet_telemetry_exports_total", signal="logs") == 1
        assert rig.value("gateway_fleet_telemetry_items_total", signal="logs") == 3


async def test_configured_groups_partition_callers(tmp_path: Path) -> None:
    """With GATEWAY_TELEMETRY_GROUPS, only those groups are labels (others fold into ``other``),
    and they exist at zero before any export."""
    async with telemetry_rig(tmp_path, {"GATEWAY_TELEMETRY_GROUPS": "beta,alpha"}) as rig:
        assert rig.samples("gateway_fleet_sessions_total") == {
            (("group", "beta"),): 0, (("group", "alpha"),): 0, (("group", "other"),): 0
        }  # fmt: skip
        body = otlp_json(Recorder().record(Activity(sessions=3)))
        for key in (ALPHA_KEY, BETA_KEY, "sk-fleet-gamma-44c1"):
            assert (await post(rig, "/v1/metrics", body, "application/json", key=key))[0] == 200
        assert rig.value("gateway_fleet_sessions_total", group="alpha") == 3
        assert rig.value("gateway_fleet_sessions_total", group="beta") == 3
        assert rig.value("gateway_fleet_sessions_total", group="other") == 3  # gamma is not listed
        assert {dict(k)["group"] for k in rig.samples("gateway_fleet_active_users")} == {
            "alpha",
            "beta",
            "other",
        }


async def test_other_exporters_metrics_are_received_not_recorded(tmp_path: Path) -> None:
    """An export without any Claude Code metric is accepted (200) but takes no group label and makes
    nobody an active Claude Code user."""
    async with telemetry_rig(tmp_path, {"GATEWAY_TELEMETRY_MAX_GROUPS": "1"}) as rig:
        quiet = Activity(sessions=0, cost={}, tokens={}, lines={}, commits=0, pull_requests=0, active={},
                         decisions={})  # fmt: skip
        body = otlp_json(Recorder().record(quiet))  # only the unrelated library's counter
        status, _, _ = await post(rig, "/v1/metrics", body, "application/json", key=BETA_KEY)
        assert status == 200
        assert rig.value("gateway_fleet_telemetry_items_total", signal="metrics") == 1
        assert rig.value("gateway_fleet_telemetry_points_recorded_total") == 0
        assert {dict(k)["group"] for k in rig.samples("gateway_fleet_active_users")} == {"other"}
        # the one group label is still free for the first Claude Code client
        body = otlp_json(Recorder().record(Activity()))
        assert (await post(rig, "/v1/metrics", body, "application/json"))[0] == 200
        assert rig.value("gateway_fleet_sessions_total", group="alpha") == 1
        assert rig.value("gateway_fleet_active_users", group="alpha") == 1


async def test_huge_points_never_make_a_series_infinite(tmp_path: Path) -> None:
    def export(*values: float) -> bytes:
        points = b", ".join(b'{"asDouble": %r, "attributes": [{"key": "model", "value": {"stringValue": '
                            b'"claude-sonnet-4-5"}}]}' % value for value in values)
        return (b'{"resourceMetrics": [{"scopeMetrics": [{"metrics": [{"name": "claude_code.cost.usage", '
                b'"sum": {"aggregationTemporality": 1, "isMonotonic": true, "dataPoints": [' + points + b"]}}]}]}]}")

    async with telemetry_rig(tmp_path) as rig:
        for body in (export(1.7e308, 1.7e308), export(0.25)):
            status, _, _ = await post(rig, "/v1/metrics", body, "application/json")
            assert status == 200
            rig.metrics.exposition()  # a scrape between the exports (the top-k admits the user)
        costs = rig.samples("gateway_fleet_cost_usd_total")
        assert sum(costs.values()) == pytest.approx(0.25)  # each huge point was left out
        user = rig.samples("gateway_fleet_user_cost_usd_total")
        assert sum(user.values()) == pytest.approx(0.25)
