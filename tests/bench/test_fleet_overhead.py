"""The fleet-overhead bench (``python -m bench.fleet_overhead``): a tiny real run, its figures, its
set-up and the load generator's key rotation.

The run spawns both real gateways (static keys; sign-in + policy) in front of the fake upstream and
checks that the ratio comes from the CPU each gateway process really used, and that the sign-in
load really went through sign-in and the policy (so the bench cannot measure static keys twice).
No timing or ratio value is asserted: the machine is shared.
"""

from __future__ import annotations

import math
import socket
import statistics
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web

from bench import fleet_overhead, fleet_setup
from bench.fleet_report import RATIO_LIMIT, SIGNIN, STATIC, FleetCell
from bench.loadgen import LoadConfig, run_load
from bench.report import RoundCpu, Summary, TargetRun
from gateway.config_values import optional_url
from gateway.fleet.policy import Policy
from gateway.fleet.policy_file import load_policy
from gateway.fleet.signing_keys import parse_signing_keys
from gateway.fleet.tokens import TokenSigner

pytestmark = pytest.mark.timeout(300)


def _round_ms(entry: dict[str, Any]) -> float:
    return float(entry["cpu_s"]) * 1e3 / int(entry["completed"])


def test_tiny_run_measures_both_gateways_and_proves_the_policy_ran(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "fleet.json"
    argv = ["--duration", "0.4", "--warmup", "0.2", "--rounds", "2", "--concurrency", "4"]
    code = fleet_overhead.main([*argv, "--users", "6", "--deltas", "5", "--json", str(out)])
    printed = capsys.readouterr().out
    report: dict[str, Any] = orjson.loads(out.read_bytes())
    assert code == 0, printed
    assert report["ok"] and all(check["passed"] for check in report["checks"]), report["checks"]
    names = " ".join(check["name"] for check in report["checks"])
    for needed in ("never contacted its IdP", "sign-in bearer gets 401", "spend-cap headers", "group pool"):
        assert needed in names
    assert [(c["mode"], c["concurrency"]) for c in report["results"]] == [("nonstream", 4), ("stream", 4)]
    for cell in report["results"]:
        per_round = []
        for name in (STATIC, SIGNIN):
            rounds = cell[name]["rounds"]
            assert len(rounds) == 2
            # real CPU read from /proc for real completed requests: no made-up figure gets through
            assert all(r["cpu_s"] > 0 and r["completed"] > 0 for r in rounds), rounds
            per_round.append([_round_ms(r) for r in rounds])
            assert cell[name]["rps"] > 0
        ratios = [b / a for a, b in zip(per_round[0], per_round[1], strict=True)]
        assert cell["cpu_ratio"]["rounds"] == pytest.approx(ratios)
        assert cell["cpu_ratio"]["median"] == pytest.approx(statistics.median(ratios))
        assert cell["cpu_ratio"]["passed"] == (cell["cpu_ratio"]["median"] <= RATIO_LIMIT)
    assert "PASS" in printed or "MISS" in printed
    assert "daily_usd" in report["policy_file"]


def _summary(rps: float = 100.0) -> Summary:
    return Summary("nonstream", 10, 100, 0, rps, 1.0, 2.0, 1.0, 0.5, math.nan)


def _run(*rounds: tuple[float | None, int]) -> TargetRun:
    return TargetRun(_summary(), tuple(RoundCpu(1.0, cpu, done) for cpu, done in rounds), {})


def test_ratio_is_the_median_of_per_round_ratios() -> None:
    static = _run((1.0, 1000), (1.0, 1000), (1.2, 1000))  # 1.0, 1.0, 1.2 ms
    signin = _run((1.1, 1000), (1.3, 1000), (1.2, 1000))  # 1.1, 1.3, 1.2 ms
    cell = FleetCell("nonstream", 10, static, signin)
    assert cell.round_ratios() == pytest.approx([1.1, 1.3, 1.0])
    assert cell.median_ratio == pytest.approx(1.1)
    assert cell.spread == pytest.approx((1.0, 1.3))
    assert cell.pooled_ratio == pytest.approx(3.6 / 3.2)
    assert cell.passed
    slow = FleetCell("nonstream", 10, static, _run((1.2, 1000), (1.2, 1000), (1.5, 1000)))
    assert slow.median_ratio == pytest.approx(1.2) and not slow.passed


def test_unmeasured_rounds_never_pass() -> None:
    cell = FleetCell("stream", 50, _run((None, 1000)), _run((1.0, 1000)))
    assert cell.round_ratios() == [] and math.isnan(cell.median_ratio) and not cell.passed
    empty = FleetCell("stream", 50, _run((1.0, 0)), _run((1.0, 1000)))
    assert not empty.passed


def test_prepared_policy_and_tokens_are_the_gateways_own(tmp_path: Path) -> None:
    idp = fleet_setup.IdpSentinel()
    try:
        fleet = fleet_setup.prepare(tmp_path, "http://127.0.0.1:4321/", idp.url, 4)
        assert fleet.env["GATEWAY_OIDC_ISSUER"] == idp.url
        assert len(fleet.tokens) == 4 and fleet.tokens_file.read_text().split() == fleet.tokens
        policy = Policy(load_policy(fleet.policy_file))
        keys = parse_signing_keys(Path(fleet.env["GATEWAY_TOKEN_SIGNING_KEYS_FILE"]).read_text())
        # the gateway's issuer is its normalised GATEWAY_PUBLIC_URL
        issuer = optional_url(fleet.env["GATEWAY_PUBLIC_URL"])
        assert isinstance(issuer, str)
        signer = TokenSigner(keys, issuer, 3600, time.time)
        principals = [signer.verify(token).principal for token in fleet.tokens]
        assert len({p.subject for p in principals}) == 4
        assert all(fleet_setup.GROUP in p.groups for p in principals)
        effective = policy.for_principal(principals[0])
        assert effective.caps and effective.rates and effective.settings is not None
        assert effective.models.refusal(fleet_setup.DENIED_MODEL) is not None
        assert effective.models.refusal("claude-sonnet-4-5") is None
        assert fleet_setup.ADMIN_GROUP in policy.admin_groups
        assert not idp.contacted()
        with socket.create_connection(("127.0.0.1", int(idp.url.rsplit(":", 1)[1])), timeout=5):
            deadline = time.monotonic() + 5
            while not idp.contacted():  # the handshake lands in the backlog
                assert time.monotonic() < deadline
                time.sleep(0.01)
    finally:
        idp.close()


async def test_load_generator_rotates_through_the_keys_file(tmp_path: Path) -> None:
    seen: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(request.headers["authorization"])
        await request.read()
        return web.json_response({"type": "message"})

    app = web.Application()
    app.router.add_post("/v1/messages", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    keys = tmp_path / "keys"
    keys.write_text("alpha\nbravo\n\ncharlie\n")
    try:
        cfg = LoadConfig(
            url=f"http://127.0.0.1:{port}",
            concurrency=2,
            duration=0.3,
            warmup=0.0,
            auth_header="authorization",
            keys_file=str(keys),
        )
        samples = await run_load(cfg)
    finally:
        await runner.cleanup()
    assert samples.ok > 6 and samples.error_count == 0 and samples.errors_outside == 0
    counts = {key: seen.count(f"Bearer {key}") for key in ("alpha", "bravo", "charlie")}
    assert sum(counts.values()) == len(seen)
    assert max(counts.values()) - min(counts.values()) <= 2, counts  # round-robin, in flight aside
