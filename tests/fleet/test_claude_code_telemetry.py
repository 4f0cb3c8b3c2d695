"""The real Claude Code CLI exporting its own telemetry to the gateway while it works through it.

``claude -p`` runs against the gateway (in front of the first-party emulator) with
``CLAUDE_CODE_ENABLE_TELEMETRY=1`` and its OTLP exporters pointed at the same gateway, over
``http/protobuf`` (gzip) and ``http/json``. The CLI does not attach its API credential to OTLP
exports (observed: 2.1.197 and 2.1.332 send no ``Authorization`` unless
``OTEL_EXPORTER_OTLP_HEADERS`` says so), so the run sets the header as the README tells developers
to. Its session, tokens, cost and active time appear as ``gateway_fleet_*`` series of the key's
team, and the output and input tokens it reports equal the ones the gateway counted itself for
the same requests.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from emulators import EmulatorConfig, run_emulator
from tests.fleet.telemetry_rig import ALPHA_KEY, TelemetryRig, telemetry_rig
from tests.support.claude_code import claude_env, cli, run_claude, versions_under_test

pytestmark = pytest.mark.timeout(180)

UPSTREAM_KEY = "sk-ant-upstream-fleet-telemetry"
PROTOCOLS = {"http/protobuf": {"OTEL_EXPORTER_OTLP_COMPRESSION": "gzip"}, "http/json": {}}


def fleet_tokens(rig: TelemetryRig, kind: str) -> float:
    return sum(
        value
        for labels, value in rig.samples("gateway_fleet_tokens_total").items()
        if dict(labels)["type"] == kind and dict(labels)["group"] == "alpha"
    )


def gateway_tokens(rig: TelemetryRig, kind: str) -> float:
    return sum(
        value
        for labels, value in rig.samples("gateway_tokens_total").items()
        if dict(labels)["kind"] == kind and dict(labels)["team"] == "alpha"
    )


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("version", versions_under_test())
async def test_claude_code_telemetry_becomes_fleet_series(
    version: str, protocol: str, tmp_path: Path
) -> None:
    binary = cli(version)
    workdir = tmp_path / "work"
    workdir.mkdir()
    async with (
        run_emulator(EmulatorConfig(api_keys=frozenset({UPSTREAM_KEY})), port=0) as emulator,
        telemetry_rig(tmp_path, {"ANTHROPIC_API_KEY": UPSTREAM_KEY}, upstream=emulator.base_url) as rig,
    ):
        env = claude_env(
            tmp_path / "home",
            ANTHROPIC_BASE_URL=rig.base_url,
            ANTHROPIC_AUTH_TOKEN=ALPHA_KEY,
            CLAUDE_CODE_ENABLE_TELEMETRY="1",
            OTEL_METRICS_EXPORTER="otlp",
            OTEL_LOGS_EXPORTER="otlp",
            OTEL_EXPORTER_OTLP_PROTOCOL=protocol,
            OTEL_EXPORTER_OTLP_ENDPOINT=rig.base_url,
            OTEL_EXPORTER_OTLP_HEADERS=f"Authorization=Bearer {ALPHA_KEY}",
            OTEL_METRIC_EXPORT_INTERVAL="1000",
            OTEL_LOGS_EXPORT_INTERVAL="500",
            **PROTOCOLS[protocol],
        )
        run = await run_claude(binary, ["-p", "Say hello.", "--max-turns", "1"], env, workdir, timeout_s=60)
        assert run.returncode == 0 and run.result is not None, run.describe()
        # the last export is flushed as the CLI exits; the series may trail the run a little
        deadline = asyncio.get_running_loop().time() + 15
        while fleet_tokens(rig, "output") < gateway_tokens(rig, "output") or not rig.value(
            "gateway_fleet_sessions_total", group="alpha"
        ):
            assert asyncio.get_running_loop().time() < deadline, run.describe()
            await asyncio.sleep(0.1)
        assert rig.value("gateway_fleet_sessions_total", group="alpha") == 1
        assert gateway_tokens(rig, "output") > 0
        assert fleet_tokens(rig, "output") == gateway_tokens(rig, "output")
        assert fleet_tokens(rig, "input") == gateway_tokens(rig, "input")
        cost = sum(
            v for k, v in rig.samples("gateway_fleet_cost_usd_total").items() if ("group", "alpha") in k
        )
        assert cost > 0
        assert rig.value("gateway_fleet_user_cost_usd_total", user="other") == pytest.approx(cost)
        assert rig.value("gateway_fleet_active_users", group="alpha") == 1
        assert rig.value("gateway_fleet_telemetry_exports_total", signal="logs") >= 1  # its events
        assert sum(rig.samples("gateway_fleet_telemetry_rejected_total").values()) == 0
