"""Statistics over load samples, the direct-vs-gateway comparison table, and the target check.

Nothing here asserts anything about absolute times: targets are printed next to the measured
values with a PASS/MISS marker, and it is up to the reader to judge them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from gateway.bench.loadgen import LoadSamples


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default method); NaN for no values."""
    if not 0.0 <= q <= 100.0:
        raise ValueError("q must be within [0, 100]")
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    lo = math.floor(rank)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (rank - lo)


@dataclass(frozen=True)
class Summary:
    """One load run, reduced to the figures the report shows (milliseconds, requests/s)."""

    mode: str
    concurrency: int
    ok: int
    errors: int
    rps: float
    p50_ms: float
    p99_ms: float
    mean_ms: float
    ttfb_p50_ms: float  # first body byte
    ttft_p50_ms: float  # first content_block_delta (streams; NaN otherwise)
    error_kinds: dict[str, int] = field(default_factory=dict)

    @property
    def first_token_ms(self) -> float:
        """The 'TTFB' column: first content_block_delta for streams, first body byte otherwise."""
        return self.ttft_p50_ms if self.mode == "stream" else self.ttfb_p50_ms


def summarize(samples: LoadSamples) -> Summary:
    lat = samples.latency
    return Summary(
        mode=samples.mode,
        concurrency=samples.concurrency,
        ok=samples.ok,
        errors=samples.error_count,
        rps=samples.ok / samples.duration if samples.duration > 0 else math.nan,
        p50_ms=percentile(lat, 50) * 1e3,
        p99_ms=percentile(lat, 99) * 1e3,
        mean_ms=(sum(lat) / len(lat) * 1e3) if lat else math.nan,
        ttfb_p50_ms=percentile(samples.ttfb, 50) * 1e3,
        ttft_p50_ms=percentile(samples.ttft, 50) * 1e3,
        error_kinds=dict(samples.errors),
    )


@dataclass(frozen=True)
class Comparison:
    """The same load run directly against the upstream and through the gateway under test."""

    direct: Summary
    gateway: Summary
    cpu_direct: dict[str, float]  # role -> % of one core during the measurement window
    cpu_gateway: dict[str, float]

    @property
    def added_p50_ms(self) -> float:
        return self.gateway.p50_ms - self.direct.p50_ms

    @property
    def rps_ratio(self) -> float:
        return self.gateway.rps / self.direct.rps if self.direct.rps else math.nan

    @property
    def p50_ratio(self) -> float:
        return self.gateway.p50_ms / self.direct.p50_ms if self.direct.p50_ms else math.nan


@dataclass(frozen=True)
class TargetCheck:
    name: str
    measured: float
    limit: float
    unit: str
    higher_is_better: bool

    @property
    def passed(self) -> bool:
        if math.isnan(self.measured):
            return False
        return self.measured >= self.limit if self.higher_is_better else self.measured < self.limit

    def line(self) -> str:
        op = ">=" if self.higher_is_better else "<"
        mark = "PASS" if self.passed else "MISS"
        measured = _fmt(self.measured, 2)
        return (
            f"  [{mark}] {self.name:<42} measured {measured:>9} {self.unit:<5} target {op} {_g(self.limit)}"
        )


def _g(v: float) -> str:
    return f"{v:g}"


def _fmt(v: float, digits: int = 2) -> str:
    return "-" if math.isnan(v) else f"{v:.{digits}f}"


def check_targets(
    comparisons: Sequence[Comparison], startup_s: float | None, idle_rss_mb: float | None
) -> list[TargetCheck]:
    """The issue's targets, evaluated against whatever was measured (absent figures are skipped)."""
    checks: list[TargetCheck] = []
    for c in comparisons:
        if c.direct.concurrency == 1:
            checks.append(
                TargetCheck(f"added p50 latency, {c.direct.mode}, c=1", c.added_p50_ms, 1.0, "ms", False)
            )
        if c.gateway.concurrency == 50:
            limit = 2000.0 if c.gateway.mode == "nonstream" else 800.0
            checks.append(
                TargetCheck(
                    f"gateway throughput, {c.gateway.mode}, c=50", c.gateway.rps, limit, "req/s", True
                )
            )
    if idle_rss_mb is not None:
        checks.append(TargetCheck("idle RSS", idle_rss_mb, 80.0, "MB", False))
    if startup_s is not None:
        checks.append(TargetCheck("start-up to first served request", startup_s, 2.0, "s", False))
    return checks


def format_cpu(comparisons: Sequence[Comparison], label: str = "gateway") -> list[str]:
    """CPU share of each process role during each measurement window, in % of one core."""
    roles: list[str] = []
    for c in comparisons:
        for role in [*c.cpu_direct, *c.cpu_gateway]:
            if role not in roles:
                roles.append(role)
    widths = [max(5, len(r)) for r in roles]
    cols = " ".join(f"{r:>{w}}" for r, w in zip(roles, widths, strict=True))
    rows = [
        "CPU during each measurement window, % of one core (machine = all busy CPU, at most 100% x cores;",
        "  other procs = processes outside the benchmark; kernel = busy CPU charged to no process, mostly",
        "  loopback softirq work):",
        f"{'mode':>10} {'conc':>5} {'run':>8} | {cols}",
    ]
    for c in comparisons:
        for run, cpu in (("direct", c.cpu_direct), (label, c.cpu_gateway)):
            vals = " ".join(
                f"{cpu[r]:>{w}.0f}" if r in cpu else f"{'-':>{w}}" for r, w in zip(roles, widths, strict=True)
            )
            rows.append(f"{c.direct.mode:>10} {c.direct.concurrency:>5} {run:>8} | {vals}")
    return rows


def _cols(s: Summary) -> str:
    return f"{_fmt(s.p50_ms):>7} {_fmt(s.p99_ms):>7} {_fmt(s.first_token_ms):>7} {_fmt(s.rps, 0):>9}"


def format_table(comparisons: Sequence[Comparison], label: str = "gateway") -> str:
    """The main comparison table plus a CPU-share table (percent of one core per role)."""
    head1 = f"{'':>16} | {'direct (fake upstream)':^33} | {label + ' -> fake upstream':^33} | {'':^21}"
    head2 = (
        f"{'mode':>10} {'conc':>5} | {'p50':>7} {'p99':>7} {'TTFB':>7} {'rps':>9} | "
        f"{'p50':>7} {'p99':>7} {'TTFB':>7} {'rps':>9} | {'+p50ms':>7} {'rps x':>6} {'p50 x':>6}"
    )
    rows = [head1, head2, "-" * len(head2)]
    for c in comparisons:
        d, g = c.direct, c.gateway
        err = ""
        if d.errors or g.errors:
            err = f"  errors: direct {d.errors}, {label} {g.errors}"
        rows.append(
            f"{d.mode:>10} {d.concurrency:>5} | {_cols(d)} | {_cols(g)} | "
            f"{_fmt(c.added_p50_ms):>7} {_fmt(c.rps_ratio):>6} {_fmt(c.p50_ratio):>6}{err}"
        )
    rows.append("latencies in ms; TTFB = p50 time to the first content_block_delta (stream)")
    rows.append("  or to the first body byte (nonstream);")
    rows.append("rps x = gateway/direct throughput; p50 x = gateway/direct median latency")
    if any(c.cpu_direct or c.cpu_gateway for c in comparisons):
        rows += ["", *format_cpu(comparisons, label)]
    return "\n".join(rows)


def format_targets(checks: Sequence[TargetCheck]) -> str:
    lines = [c.line() for c in checks] or ["  (none of the targeted figures was measured in this run)"]
    return "\n".join(["Targets (from the issue; measured on this machine, not asserted):", *lines])
