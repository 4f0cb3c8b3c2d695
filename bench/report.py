"""Statistics over load samples, the per-target figures, their ratios to the floor, and the targets.

Every mode x concurrency ("cell") is run against three targets: ``direct`` (the fake upstream
itself), ``passthrough`` (the bare aiohttp pass-through, the floor) and the gateway under test.
A target's CPU per request is the user + system CPU time of its process tree over a window divided
by the successful requests completed inside that same window (:class:`RoundCpu`); over several
rounds the CPU seconds and the requests are each summed before dividing.

Nothing here asserts anything about absolute times: targets are printed next to the measured
values with a PASS/MISS marker, and it is up to the reader to judge them.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from bench.loadgen import LoadSamples

DIRECT = "direct"
FLOOR = "passthrough"

# issue 12's targets (gateway relative to the pass-through floor measured in the same run)
CPU_RATIO_LIMITS = {"nonstream": 2.0, "stream": 1.6}
CPU_RATIO_CONCURRENCY = (10, 50)
ADDED_LATENCY_LIMIT_MS = 0.5
IDLE_RSS_LIMIT_MB = 60.0
STARTUP_LIMIT_S = 1.0


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
        """The 'TTFT' column: first content_block_delta for streams, first body byte otherwise."""
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


def completions_in_window(ends: Sequence[float], start: float, end: float) -> int:
    """How many completion times in ``ends`` fall within ``[start, end]``."""
    ordered = sorted(ends)
    return bisect.bisect_right(ordered, end) - bisect.bisect_left(ordered, start)


def cpu_ms_per_request(cpu_s: float | None, completed: int) -> float:
    """CPU milliseconds per completed request; NaN when unmeasured or nothing completed."""
    if cpu_s is None or completed <= 0:
        return math.nan
    return cpu_s * 1e3 / completed


def ratio(numerator: float, denominator: float) -> float:
    if math.isnan(numerator) or math.isnan(denominator) or denominator == 0:
        return math.nan
    return numerator / denominator


@dataclass(frozen=True)
class RoundCpu:
    """A target's CPU over one measured window, and the requests completed inside that window."""

    window_s: float
    cpu_s: float | None  # user + system CPU of the target's process tree; None: not measured
    completed: int

    @property
    def cpu_ms_per_req(self) -> float:
        return cpu_ms_per_request(self.cpu_s, self.completed)


@dataclass(frozen=True)
class TargetRun:
    """One target in one cell, pooled over every round it was run."""

    summary: Summary  # from every round's samples together
    rounds: tuple[RoundCpu, ...]
    cpu_shares: dict[str, float]  # role -> mean % of one core over the rounds' windows

    @classmethod
    def pool(
        cls, samples: list[LoadSamples], rounds: list[RoundCpu], shares: Sequence[Mapping[str, float]]
    ) -> TargetRun:
        roles = list(dict.fromkeys(role for s in shares for role in s))
        mean = {r: sum(s.get(r, 0.0) for s in shares) / len(shares) for r in roles} if shares else {}
        return cls(summarize(LoadSamples.pool(samples)), tuple(rounds), mean)

    @property
    def cpu_measured(self) -> bool:
        return bool(self.rounds) and all(r.cpu_s is not None for r in self.rounds)

    @property
    def cpu_ms_per_req(self) -> float:
        """Sum of CPU over sum of completed requests (NaN if any round was not measured)."""
        if not self.cpu_measured:
            return math.nan
        return cpu_ms_per_request(
            sum(r.cpu_s or 0.0 for r in self.rounds), sum(r.completed for r in self.rounds)
        )


@dataclass(frozen=True)
class Cell:
    """One mode x concurrency: every target's run."""

    mode: str
    concurrency: int
    runs: dict[str, TargetRun]

    def added_p50_ms(self, name: str) -> float:
        """Median latency the target adds over going direct to the fake upstream."""
        return self.runs[name].summary.p50_ms - self.runs[DIRECT].summary.p50_ms

    def added_ttft_ms(self, name: str) -> float:
        """Median time to the first content_block_delta the target adds (streams; NaN otherwise)."""
        return self.runs[name].summary.ttft_p50_ms - self.runs[DIRECT].summary.ttft_p50_ms

    def cpu_ratio(self, name: str) -> float:
        """The target's CPU per request over the pass-through's."""
        return ratio(self.runs[name].cpu_ms_per_req, self.runs[FLOOR].cpu_ms_per_req)

    def cpu_ratio_range(self, name: str) -> tuple[float, float]:
        """Lowest and highest per-round CPU ratio (round i of the target over round i of the floor)."""
        pairs = zip(self.runs[name].rounds, self.runs[FLOOR].rounds, strict=False)
        values = [
            v for v in (ratio(t.cpu_ms_per_req, f.cpu_ms_per_req) for t, f in pairs) if not math.isnan(v)
        ]
        return (min(values), max(values)) if values else (math.nan, math.nan)

    def rps_ratio(self, name: str) -> float:
        """The target's throughput over the pass-through's."""
        return ratio(self.runs[name].summary.rps, self.runs[FLOOR].summary.rps)


@dataclass(frozen=True)
class TargetCheck:
    """A measured figure against its upper limit (NaN never passes)."""

    name: str
    measured: float
    limit: float
    unit: str

    @property
    def passed(self) -> bool:
        return not math.isnan(self.measured) and self.measured <= self.limit


def check_targets(
    cells: Sequence[Cell], label: str, startup_s: float | None, idle_rss_mb: float | None
) -> list[TargetCheck]:
    """Issue 12's targets, evaluated against whatever was measured (absent figures are skipped)."""
    ratios: list[TargetCheck] = []
    latency: list[TargetCheck] = []
    for c in cells:
        measured_both = FLOOR in c.runs and label in c.runs and c.runs[label].cpu_measured
        if c.concurrency in CPU_RATIO_CONCURRENCY and measured_both and c.runs[FLOOR].cpu_measured:
            name = f"CPU/request {label} / pass-through, {c.mode}, c={c.concurrency}"
            ratios.append(TargetCheck(name, c.cpu_ratio(label), CPU_RATIO_LIMITS[c.mode], "x"))
        if c.concurrency == 1 and DIRECT in c.runs and label in c.runs:
            if c.mode == "nonstream":
                name, added = "added p50 latency, nonstream, c=1", c.added_p50_ms(label)
            else:
                name, added = "added TTFT p50, stream, c=1", c.added_ttft_ms(label)
            latency.append(TargetCheck(name, added, ADDED_LATENCY_LIMIT_MS, "ms"))
    checks = ratios + latency
    if idle_rss_mb is not None:
        checks.append(TargetCheck("idle RSS", idle_rss_mb, IDLE_RSS_LIMIT_MB, "MB"))
    if startup_s is not None:
        checks.append(TargetCheck("start-up (spawn -> first served 200)", startup_s, STARTUP_LIMIT_S, "s"))
    return checks
