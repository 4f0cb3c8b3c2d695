"""Text tables of a benchmark run: latency and throughput per target, cost relative to the
pass-through floor, CPU share per process role, and the targets with PASS/MISS."""

from __future__ import annotations

import math
from collections.abc import Sequence

from bench.report import DIRECT, FLOOR, Cell, Summary, TargetCheck

TITLES = {DIRECT: "direct (fake upstream)", FLOOR: "pass-through (floor)"}


def _fmt(v: float, digits: int = 2) -> str:
    return "-" if math.isnan(v) else f"{v:.{digits}f}"


def _names(cells: Sequence[Cell]) -> list[str]:
    return list(dict.fromkeys(name for c in cells for name in c.runs))


def _latency_cols(s: Summary | None) -> str:
    if s is None:
        return f"{'-':>7} {'-':>7} {'-':>7} {'-':>7}"
    return f"{_fmt(s.p50_ms):>7} {_fmt(s.p99_ms):>7} {_fmt(s.first_token_ms):>7} {_fmt(s.rps, 0):>7}"


def latency_table(cells: Sequence[Cell]) -> list[str]:
    names = _names(cells)
    groups = " | ".join(f"{TITLES.get(n, n):^31}" for n in names)
    cols = " | ".join(f"{'p50':>7} {'p99':>7} {'TTFT':>7} {'req/s':>7}" for _ in names)
    head = f"{'mode':>10} {'conc':>4} | {cols}"
    rows = ["Latency (ms) and throughput, per target:", f"{'':>15} | {groups}", head, "-" * len(head)]
    for c in cells:
        vals = " | ".join(_latency_cols(c.runs[n].summary if n in c.runs else None) for n in names)
        errors = {n: r.summary.errors for n, r in c.runs.items() if r.summary.errors}
        rows.append(f"{c.mode:>10} {c.concurrency:>4} | {vals}" + (f"  errors: {errors}" if errors else ""))
    rows.append("TTFT = p50 time to the first content_block_delta (stream) or first body byte (nonstream)")
    return rows


def cost_table(cells: Sequence[Cell], label: str) -> list[str]:
    head = (
        f"{'mode':>10} {'conc':>4} | {'floor':>6} {label[:7]:>7} {'ratio':>5} {'(rounds)':>11} | "
        f"{'ratio':>5} | {'floor':>6} {label[:7]:>7} | {'floor':>6} {label[:7]:>7}"
    )
    groups = (
        f"{'':>15} | {'CPU ms per completed request':^32} | {'req/s':^5} | "
        f"{'added p50 ms':^14} | {'added TTFT ms':^14}"
    )
    rows = [
        f"Cost relative to the pass-through floor ({label} / pass-through):",
        groups,
        head,
        "-" * len(head),
    ]
    for c in cells:
        if FLOOR not in c.runs or label not in c.runs:
            continue
        lo, hi = c.cpu_ratio_range(label)
        spread = "" if math.isnan(lo) else f"{lo:.2f}-{hi:.2f}"
        has_direct = DIRECT in c.runs
        added = [
            _fmt(f(n)) if has_direct else "-"
            for f in (c.added_p50_ms, c.added_ttft_ms)
            for n in (FLOOR, label)
        ]
        rows.append(
            f"{c.mode:>10} {c.concurrency:>4} | {_fmt(c.runs[FLOOR].cpu_ms_per_req, 3):>6} "
            f"{_fmt(c.runs[label].cpu_ms_per_req, 3):>7} {_fmt(c.cpu_ratio(label)):>5} {spread:>11} | "
            f"{_fmt(c.rps_ratio(label)):>5} | {added[0]:>6} {added[1]:>7} | {added[2]:>6} {added[3]:>7}"
        )
    rows += [
        "CPU = user + system CPU of the target's process tree over the measured window / requests",
        "  completed in that window, pooled over the rounds; (rounds) = lowest-highest per-round ratio;",
        "added = target p50 (TTFT p50 for streams) minus the direct p50 of the same cell",
    ]
    return rows


def cpu_share_table(cells: Sequence[Cell]) -> list[str]:
    roles = list(dict.fromkeys(r for c in cells for run in c.runs.values() for r in run.cpu_shares))
    if not roles:
        return []
    widths = [max(5, len(r)) for r in roles]
    cols = " ".join(f"{r:>{w}}" for r, w in zip(roles, widths, strict=True))
    rows = [
        "CPU during each measurement window, % of one core, mean over rounds (machine = all busy CPU,",
        "  at most 100% x cores; other procs = processes outside the benchmark; kernel = busy CPU",
        "  charged to no process, mostly loopback softirq work):",
        f"{'mode':>10} {'conc':>4} {'run':>11} | {cols}",
    ]
    for c in cells:
        for name, run in c.runs.items():
            cpu = run.cpu_shares
            vals = " ".join(
                f"{cpu[r]:>{w}.0f}" if r in cpu else f"{'-':>{w}}" for r, w in zip(roles, widths, strict=True)
            )
            rows.append(f"{c.mode:>10} {c.concurrency:>4} {name[:11]:>11} | {vals}")
    return rows


def format_results(cells: Sequence[Cell], label: str) -> str:
    parts = [latency_table(cells), cost_table(cells, label), cpu_share_table(cells)]
    return "\n\n".join("\n".join(p) for p in parts if p)


def check_line(check: TargetCheck) -> str:
    mark = "PASS" if check.passed else "MISS"
    return (
        f"  [{mark}] {check.name:<50} measured {_fmt(check.measured):>7} {check.unit:<2} "
        f"target <= {check.limit:g}"
    )


def format_targets(checks: Sequence[TargetCheck]) -> str:
    lines = [check_line(c) for c in checks] or ["  (none of the targeted figures was measured in this run)"]
    return "\n".join(["Targets (issue 12; measured on this machine, not asserted):", *lines])
