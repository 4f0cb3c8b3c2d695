"""Figures of the fleet-overhead bench (:mod:`bench.fleet_overhead`): per mode and concurrency, the
CPU per request of the static-key gateway and of the sign-in + policy gateway, their ratio per
round (round i of one over round i of the other: the two ran back to back) with the median and
the spread over the rounds, requests/s, and PASS/MISS of the median against issue 17's 1.15x.

CPU per request is :class:`bench.report.RoundCpu`'s: user + system CPU of the gateway's process
tree over the measured window, divided by the requests completed inside that same window.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from typing import Any, Final

from bench.report import TargetRun, ratio

STATIC: Final = "static"
SIGNIN: Final = "signin"
TITLES: Final = {STATIC: "static keys", SIGNIN: "sign-in + policy"}
RATIO_LIMIT: Final = 1.15  # issue 17: sign-in tokens and policy on vs static keys


@dataclass(frozen=True)
class FleetCell:
    """One mode x concurrency: both gateways' runs, pooled over the rounds."""

    mode: str
    concurrency: int
    static: TargetRun
    signin: TargetRun

    def round_ratios(self) -> list[float]:
        """Sign-in over static CPU per request, round by round (rounds without a figure skipped)."""
        pairs = zip(self.signin.rounds, self.static.rounds, strict=True)
        values = (ratio(b.cpu_ms_per_req, a.cpu_ms_per_req) for b, a in pairs)
        return [v for v in values if not math.isnan(v)]

    @property
    def median_ratio(self) -> float:
        values = self.round_ratios()
        return statistics.median(values) if values else math.nan

    @property
    def spread(self) -> tuple[float, float]:
        values = self.round_ratios()
        return (min(values), max(values)) if values else (math.nan, math.nan)

    @property
    def pooled_ratio(self) -> float:
        """Sum of CPU over sum of requests per target, then their ratio (for comparison)."""
        return ratio(self.signin.cpu_ms_per_req, self.static.cpu_ms_per_req)

    @property
    def others_pct(self) -> float:
        """CPU that processes outside the bench used during the windows (% of one core, mean)."""
        values = [run.cpu_shares.get("other procs", math.nan) for run in (self.static, self.signin)]
        return sum(values) / len(values)

    @property
    def passed(self) -> bool:
        return not math.isnan(self.median_ratio) and self.median_ratio <= RATIO_LIMIT


def _run_json(run: TargetRun) -> dict[str, Any]:
    s = run.summary
    return {
        "cpu_ms_per_req": run.cpu_ms_per_req,
        "rps": s.rps,
        "ok": s.ok,
        "p50_ms": s.p50_ms,
        "p99_ms": s.p99_ms,
        "ttft_p50_ms": s.ttft_p50_ms,
        "rounds": [{**asdict(r), "cpu_ms_per_req": r.cpu_ms_per_req} for r in run.rounds],
        "cpu_share_pct": run.cpu_shares,
    }


def cell_json(cell: FleetCell) -> dict[str, Any]:
    lo, hi = cell.spread
    return {
        "mode": cell.mode,
        "concurrency": cell.concurrency,
        STATIC: _run_json(cell.static),
        SIGNIN: _run_json(cell.signin),
        "cpu_ratio": {
            "median": cell.median_ratio,
            "round_min": lo,
            "round_max": hi,
            "rounds": cell.round_ratios(),
            "pooled": cell.pooled_ratio,
            "limit": RATIO_LIMIT,
            "passed": cell.passed,
        },
        "rps_ratio": ratio(cell.signin.summary.rps, cell.static.summary.rps),
        "other_processes_pct": cell.others_pct,
    }


def _f(v: float, digits: int = 2) -> str:
    return "-" if math.isnan(v) else f"{v:.{digits}f}"


def table(cells: list[FleetCell]) -> list[str]:
    head = (
        f"{'mode':>10} {'conc':>4} | {'static':>7} {'sign-in':>7} | {'ratio':>6} {'rounds min..max':>16} | "
        f"{'static':>7} {'sign-in':>7} | {'others':>6} | target <= {RATIO_LIMIT:g}x"
    )
    groups = (
        f"{'':>15} | {'CPU ms/request':^15} | {'sign-in/static CPU (median)':^23} | {'req/s':^15} | "
        f"{'% core':>6} |"
    )
    rows = [groups, head, "-" * len(head)]
    for c in cells:
        lo, hi = c.spread
        rows.append(
            f"{c.mode:>10} {c.concurrency:>4} | {_f(c.static.cpu_ms_per_req, 3):>7} "
            f"{_f(c.signin.cpu_ms_per_req, 3):>7} | {_f(c.median_ratio):>5}x {_f(lo):>7}..{_f(hi)}x | "
            f"{_f(c.static.summary.rps, 0):>7} {_f(c.signin.summary.rps, 0):>7} | {_f(c.others_pct, 0):>6} | "
            f"{'PASS' if c.passed else 'MISS'}"
        )
    rows.append(
        "others = CPU used by processes outside the bench during the measured windows (mean, % of one "
        "core): a busy machine makes every figure noisy"
    )
    return rows
