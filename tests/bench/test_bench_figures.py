"""Unit tests of the benchmark's computations: CPU per request over one window, pooling rounds,
ratios to the pass-through floor, latency added over direct, and issue 12's target checks.

Every figure here is made up; nothing asserts anything about real timings.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from bench import procinfo
from bench.loadgen import LoadSamples
from bench.report import (
    DIRECT,
    FLOOR,
    Cell,
    RoundCpu,
    Summary,
    TargetRun,
    check_targets,
    completions_in_window,
    cpu_ms_per_request,
)
from bench.runner import Target, round_cpu, round_order
from bench.tables import format_results, format_targets

TICK = 1.0 / procinfo.CLK_TCK


def _summary(mode: str, conc: int, p50: float, ttft: float = math.nan, rps: float = 1000.0) -> Summary:
    return Summary(mode, conc, 100, 0, rps, p50, p50 * 3, p50, p50, ttft)


def _run(summary: Summary, *rounds: tuple[float | None, int]) -> TargetRun:
    return TargetRun(summary, tuple(RoundCpu(1.0, cpu, done) for cpu, done in rounds), {})


def _cell(mode: str, conc: int, floor_cpu: float, gw_cpu: float, gw_p50: float = 1.0) -> Cell:
    """A cell whose pass-through and gateway used ``*_cpu`` seconds for 1000 requests."""

    def ttft(ms: float) -> float:
        return math.nan if mode == "nonstream" else ms

    return Cell(
        mode,
        conc,
        {
            DIRECT: _run(_summary(mode, conc, 0.2, ttft(0.2))),
            FLOOR: _run(_summary(mode, conc, 0.5, ttft(0.4)), (floor_cpu, 1000)),
            "gateway": _run(_summary(mode, conc, gw_p50, ttft(0.6)), (gw_cpu, 1000)),
        },
    )


def test_completions_are_counted_inside_the_window_only() -> None:
    ends = [12.5, 9.99, 10.0, 11.0, 12.0, 12.0001, 3.0]
    assert completions_in_window(ends, 10.0, 12.0) == 3  # both bounds inclusive, order irrelevant
    assert completions_in_window([], 0.0, 1.0) == 0
    assert completions_in_window(ends, 13.0, 14.0) == 0


def test_cpu_per_request_is_cpu_over_completed() -> None:
    assert cpu_ms_per_request(0.5, 1000) == pytest.approx(0.5)
    assert cpu_ms_per_request(1.2, 3) == pytest.approx(400.0)
    assert math.isnan(cpu_ms_per_request(None, 1000))  # not measured
    assert math.isnan(cpu_ms_per_request(0.5, 0))  # nothing completed


def _snapshot(at: float, ticks: dict[int, int]) -> procinfo.CpuSnapshot:
    roles = {"passthrough": frozenset({1, 2}), "upstream": frozenset({3})}
    return procinfo.CpuSnapshot(at, roles, {pid: (t, "python") for pid, t in ticks.items()}, 0.0)


def test_round_cpu_uses_one_window_for_cpu_and_requests() -> None:
    before = _snapshot(10.0, {1: 100, 2: 7, 3: 50, 4: 900})
    after = _snapshot(12.0, {1: 140, 2: 17, 3: 90, 4: 5000})  # pid 4 is outside every role
    # completions before 10.0 belong to the warm-up, after 12.0 to the wind-down: neither counts
    ends = [9.0, 9.5, 9.999, 10.0, 10.5, 11.0, 11.5, 12.0, 12.01, 12.5]
    cpu = round_cpu(before, after, ends, "passthrough")
    assert cpu.completed == 5
    assert cpu.window_s == pytest.approx(2.0)
    assert cpu.cpu_s == pytest.approx((40 + 10) * TICK)  # both processes of the role's tree
    assert cpu.cpu_ms_per_req == pytest.approx((40 + 10) * TICK * 1e3 / 5)
    unmeasured = round_cpu(before, after, ends, None)
    assert unmeasured.cpu_s is None and unmeasured.completed == 5
    assert math.isnan(unmeasured.cpu_ms_per_req)


def test_rounds_are_pooled_by_summing_cpu_and_requests() -> None:
    run = _run(_summary("nonstream", 10, 1.0), (1.0, 1000), (0.5, 100))
    # 1.5 s over 1100 requests, not the mean of the per-round figures (1.0 and 5.0 ms)
    assert run.cpu_ms_per_req == pytest.approx(1.5e3 / 1100)
    partly = _run(_summary("nonstream", 10, 1.0), (1.0, 1000), (None, 100))
    assert not partly.cpu_measured and math.isnan(partly.cpu_ms_per_req)

    a = LoadSamples("stream", 10, 2.0, latency=[0.001] * 3, ttfb=[0.001] * 3, ttft=[0.001] * 3, ok=3)
    b = LoadSamples("stream", 10, 2.0, latency=[0.003] * 5, ttfb=[0.002] * 5, ttft=[0.002] * 5, ok=5)
    pooled = TargetRun.pool(
        [a, b], [RoundCpu(2.0, 0.1, 3), RoundCpu(2.0, 0.1, 5)], [{"x": 10.0}, {"x": 30.0}]
    )
    assert pooled.summary.ok == 8 and pooled.summary.concurrency == 10
    assert pooled.summary.rps == pytest.approx(8 / 4.0)
    assert pooled.summary.p50_ms == pytest.approx(3.0)
    assert pooled.cpu_shares == {"x": 20.0}
    assert pooled.cpu_ms_per_req == pytest.approx(0.2e3 / 8)


def test_ratios_and_added_latency_are_relative_to_floor_and_direct() -> None:
    cell = _cell("stream", 10, floor_cpu=0.25, gw_cpu=0.40, gw_p50=1.5)
    assert cell.cpu_ratio("gateway") == pytest.approx(1.6)
    assert cell.rps_ratio("gateway") == pytest.approx(1.0)
    assert cell.added_p50_ms("gateway") == pytest.approx(1.5 - 0.2)
    assert cell.added_p50_ms(FLOOR) == pytest.approx(0.5 - 0.2)
    assert cell.added_ttft_ms("gateway") == pytest.approx(0.6 - 0.2)
    assert cell.added_ttft_ms(FLOOR) == pytest.approx(0.4 - 0.2)
    nonstream = _cell("nonstream", 1, 0.1, 0.2)
    assert math.isnan(nonstream.added_ttft_ms("gateway"))  # no TTFT without a stream

    faster = replace(cell.runs["gateway"].summary, rps=500.0)
    half = Cell("stream", 10, {**cell.runs, "gateway": replace(cell.runs["gateway"], summary=faster)})
    assert half.rps_ratio("gateway") == pytest.approx(0.5)

    two_rounds = Cell(
        "stream",
        10,
        {
            FLOOR: _run(cell.runs[FLOOR].summary, (0.2, 1000), (0.3, 1000)),
            "gateway": _run(cell.runs["gateway"].summary, (0.3, 1000), (0.3, 1000)),
        },
    )
    assert two_rounds.cpu_ratio_range("gateway") == pytest.approx((1.0, 1.5))
    assert two_rounds.cpu_ratio("gateway") == pytest.approx(0.6 / 0.5)


def test_targets_pass_at_the_limit_and_miss_above_it() -> None:
    cells = [
        _cell("nonstream", 1, 0.1, 0.9, gw_p50=0.7),  # added p50 0.5: at the limit
        _cell("nonstream", 10, 0.10, 0.20),  # 2.0x: at the limit
        _cell("nonstream", 50, 0.10, 0.201),  # 2.01x: above
        _cell("stream", 1, 0.1, 0.9),  # added TTFT 0.4
        _cell("stream", 10, 0.25, 0.40),  # 1.6x: at the limit
        _cell("stream", 50, 0.25, 0.45),  # 1.8x: above the stream limit, under the non-stream one
    ]
    checks = {c.name: c for c in check_targets(cells, "gateway", startup_s=1.2, idle_rss_mb=60.0)}
    assert {n: c.passed for n, c in checks.items()} == {
        "CPU/request gateway / pass-through, nonstream, c=10": True,
        "CPU/request gateway / pass-through, nonstream, c=50": False,
        "CPU/request gateway / pass-through, stream, c=10": True,
        "CPU/request gateway / pass-through, stream, c=50": False,
        "added p50 latency, nonstream, c=1": True,
        "added TTFT p50, stream, c=1": True,
        "idle RSS": True,
        "start-up (spawn -> first served 200)": False,
    }
    assert checks["CPU/request gateway / pass-through, stream, c=50"].measured == pytest.approx(1.8)
    assert checks["added TTFT p50, stream, c=1"].measured == pytest.approx(0.4)
    text = format_targets(list(checks.values()))
    assert text.count("[PASS]") == 5 and text.count("[MISS]") == 3
    table = format_results(cells, "gateway")
    assert "pass-through (floor)" in table and "1.60" in table and "2.01" in table


def test_unmeasured_figures_are_skipped_and_nan_never_passes() -> None:
    cell = _cell("nonstream", 10, 0.1, 0.2)
    blind = Cell("nonstream", 10, {**cell.runs, "target": _run(cell.runs["gateway"].summary, (None, 1000))})
    # another gateway benchmarked without --target-pid: no CPU, so no ratio check at all
    assert check_targets([blind], "target", None, None) == []
    failed = Cell("nonstream", 10, {**cell.runs, "gateway": _run(cell.runs["gateway"].summary, (0.2, 0))})
    [check] = check_targets([failed], "gateway", None, None)
    assert math.isnan(check.measured) and not check.passed


def test_rounds_alternate_the_target_order() -> None:
    targets = [Target(DIRECT, "u", None), Target(FLOOR, "p", 1), Target("gateway", "g", 2)]
    assert [t.name for t in round_order(targets, 0)] == [DIRECT, FLOOR, "gateway"]
    assert [t.name for t in round_order(targets, 1)] == ["gateway", FLOOR, DIRECT]
    assert [t.name for t in round_order(targets, 2)] == [DIRECT, FLOOR, "gateway"]
