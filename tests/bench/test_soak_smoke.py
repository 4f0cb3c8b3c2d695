"""Smoke test of the soak harness (``python -m bench.soak``) at a tiny scale: the real
emulator and gateway processes, 20 streams held about 3 s, then 6 s of mixed traffic.

This checks that the harness works end to end (every stream and request answered as expected,
every figure computed, the exit status agreeing with the targets); it makes no claim about memory
or speed: nothing here asserts an absolute size or time. The report's arithmetic (slope, checks)
is tested on its own below.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import orjson
import pytest

from bench import soak, soak_report
from bench.soak_mixed import MixedConfig, kinds
from bench.soak_requests import Exchange
from bench.soak_streams import schedule

STREAMS = 20
CONTROL = 4
INTERVAL_S = 0.1
HOLD_S = 3.0


def test_soak_runs_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "soak.json"
    code = soak.main(
        [
            "--streams", str(STREAMS), "--control-streams", str(CONTROL), "--hold-s", str(HOLD_S),
            "--event-interval", str(INTERVAL_S), "--ramp-s", "0.4", "--mixed-minutes", "0.1",
            "--rate", "30", "--long-deltas", "5", "--sample-s", "0.25", "--json", str(out),
        ]
    )  # fmt: skip
    printed = capsys.readouterr().out
    report: dict[str, Any] = orjson.loads(out.read_bytes())
    assert code == (0 if report["passed"] else 1), printed
    assert report["passed"] is all(c["passed"] for c in report["checks"])
    assert report["gateway_alive"] is True

    hold = report["phase1"]
    deltas = round(HOLD_S / INTERVAL_S)
    assert hold["config"]["deltas"] >= deltas  # the sizing found a budget giving that many deltas
    for group, n in (("gateway", STREAMS), ("direct", CONTROL)):
        stats = hold[group]
        assert stats["streams"] == stats["ok"] == n, (group, stats["error_kinds"])
        # every delta-to-delta gap of every stream was timed
        assert stats["gaps"] == n * (hold["config"]["deltas"] - 1)
        assert stats["excess_p50_ms"] <= stats["excess_p99_ms"] <= stats["excess_max_ms"]
        assert 0 < stats["all_open"]["gaps"] < stats["gaps"]  # the ramp's gaps are left out there
    assert hold["most_open"] == STREAMS and hold["rss_open_readings"] >= 1
    assert hold["rss_idle_mb"] > 0 and hold["rss_open_mb"] > 0
    expected_kb = (hold["rss_open_mb"] - hold["rss_idle_mb"]) * 1024 / STREAMS
    assert math.isclose(hold["kb_per_open_stream"], expected_kb)
    gateway, direct, added = hold["gateway"], hold["direct"], hold["added_delay_all_open"]
    assert added["gaps"] + added["unpaired"] == gateway["all_open"]["gaps"] and added["gaps"] > 0
    assert added["p50_ms"] <= added["p99_ms"] == hold["p99_added_inter_event_delay_ms"] <= added["max_ms"]
    assert hold["added_delay_whole"]["gaps"] + hold["added_delay_whole"]["unpaired"] == gateway["gaps"]
    assert math.isclose(hold["p99_difference_whole_ms"], gateway["excess_p99_ms"] - direct["excess_p99_ms"])

    assert set(hold["cpu_pct"]) == {"gateway", "emulator", "client", "machine"}

    mixed = report["phase2"]
    assert mixed["errors"] == 0, mixed["error_kinds"]
    assert mixed["fresh_gateway"] is True and mixed["rss_idle_mb"] > 0  # phase 2 on a new process
    assert set(mixed["cpu_pct"]) == {"gateway", "emulator", "client", "machine"}
    assert mixed["requests"] == 180  # 6 s x 30 req/s, open loop
    # the deliberate errors got their statuses; every kind was sent
    assert set(mixed["kinds"]) == {k.name for k in kinds(MixedConfig(1.0, 1.0, 1, 16, 5, INTERVAL_S, 1.0))}
    assert all(row["errors"] == 0 for row in mixed["kinds"].values())
    assert mixed["rss"]["samples"] >= 10 and mixed["rss"]["mean_mb"] > 0
    assert report["gateway_log"]["tracebacks"] == 0
    for label in (
        "Phase 1:",
        "Phase 2:",
        "memory per open stream",
        "added inter-event delay",
        "RSS slope",
    ):
        assert label in printed


def test_linear_fit_recovers_a_line() -> None:
    xs = [0.0, 5.0, 10.0, 15.0, 20.0]
    slope, intercept = soak_report.linear_fit(xs, [100.0 + 0.2 * x for x in xs])
    assert math.isclose(slope, 0.2) and math.isclose(intercept, 100.0)
    assert all(math.isnan(v) for v in soak_report.linear_fit([1.0], [2.0]))
    assert all(math.isnan(v) for v in soak_report.linear_fit([1.0, 1.0], [2.0, 3.0]))


def test_slope_uses_only_the_last_window_of_the_traffic() -> None:
    # growth during the first 100 s, flat afterwards, samples after the traffic ended ignored
    samples = [(float(t), 50.0 + min(t, 100) * 0.1, 10) for t in range(0, 301, 5)]
    samples.append((305.0, 500.0, 10))
    flat = soak_report.slope_figures(samples, seconds=300.0, window_s=200.0)
    assert flat["samples"] == 41 and flat["slope_mb_per_10min"] == 0.0 and flat["mean_mb"] == 60.0
    growing = soak_report.slope_figures(samples, seconds=100.0, window_s=100.0)
    assert math.isclose(growing["slope_mb_per_10min"], 60.0)  # 0.1 MB/s
    assert math.isclose(growing["slope_pct_per_10min"], 100.0 * 60.0 / growing["mean_mb"])


def test_checks_miss_on_errors_and_growth_and_skip_short_windows() -> None:
    log = {"errors": 0, "tracebacks": 0}
    limits = soak_report.Limits(slope_pct=5.0, slope_min_window_s=300.0)

    def mixed(errors: int, pct: float, window_s: float, samples: int = 100) -> dict[str, Any]:
        return {
            "errors": errors,
            "rss": {"samples": samples, "window_s": window_s, "slope_pct_per_10min": pct},
        }

    def verdicts(m: dict[str, Any]) -> list[tuple[bool, bool]]:
        return [(c.evaluated, c.passed) for c in soak_report.checks(None, m, log, limits)]

    assert verdicts(mixed(0, -4.9, 1200)) == [(True, True), (True, True), (True, True)]
    assert verdicts(mixed(1, 0.0, 1200))[0] == (True, False)
    assert verdicts(mixed(0, 7.0, 1200))[1] == (True, False)
    assert verdicts(mixed(0, -7.0, 1200))[1] == (True, False)  # shrinking counts too: |slope|
    assert verdicts(mixed(0, 50.0, 60))[1] == (False, True)  # too short a window: reported only
    assert verdicts(mixed(0, 50.0, 1200, samples=3))[1] == (False, True)
    assert verdicts(mixed(0, math.nan, 1200))[1] == (True, False)
    bad_log = soak_report.checks(None, None, {"errors": 0, "tracebacks": 2}, limits)
    assert [c.passed for c in bad_log] == [False]


def test_gaps_are_chosen_by_the_arrival_of_their_second_delta() -> None:
    ex = Exchange("gateway", 0.0, delta_at=[1.0, 1.5, 2.25, 3.0])
    assert ex.deltas == 4
    assert ex.gaps() == [0.5, 0.75, 0.75]
    assert ex.gaps(2.0, 2.5) == [0.75]
    assert ex.gaps(3.5) == []
    figures = soak_report.gap_figures([ex], interval_s=0.5)
    assert figures["gaps"] == 3 and math.isclose(figures["excess_max_ms"], 250.0)
    ex.error = "stream without message_stop"  # failed streams' gaps are not counted
    assert soak_report.gap_figures([ex], interval_s=0.5)["gaps"] == 0


def test_added_delay_pairs_gateway_gaps_with_the_direct_gaps_of_the_same_second() -> None:
    # ten direct streams, 0.5 s gaps but one of 0.9 s (the 11th delta, in second 5: an emulator
    # stall both groups see); the gateway stream has that stall and one of its own (17th delta)
    def stream(kind: str, stalls: dict[int, float]) -> Exchange:
        at, t = [], 0.0
        for k in range(24):
            t += 0.5 + stalls.get(k, 0.0)
            at.append(t)
        return Exchange(kind, 0.0, delta_at=at)

    direct = [stream("direct", {10: 0.4}) for _ in range(10)]
    gateway = [stream("gateway", {10: 0.4, 16: 0.3})]
    added = soak_report.added_delay(gateway, direct, interval_s=0.5)
    assert math.isclose(added["max_ms"], 300.0)  # the shared stall cancels, the gateway's own does not
    assert added["p50_ms"] == 0.0
    # seconds where the control group had too few gaps are left out, not compared with nothing
    assert soak_report.added_delay(gateway, direct[:1], interval_s=0.5)["unpaired"] == 23
    # without a control group: the gap minus the pacing
    alone = soak_report.added_delay(gateway, [], interval_s=0.5)
    assert math.isclose(alone["max_ms"], 400.0) and alone["unpaired"] == 0


def test_control_streams_are_spread_among_the_gateway_streams() -> None:
    plan = schedule(20, 4)
    assert len(plan) == 24 and sum(plan) == 4
    positions = [i for i, direct in enumerate(plan) if direct]
    assert positions == [3, 9, 15, 21]
    assert schedule(5, 0) == [False] * 5
