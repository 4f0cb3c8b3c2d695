"""The soak's figures from its raw outcomes, its targets, and the text report.

Phase 1: memory per open stream = (gateway RSS with every stream open - idle RSS) / streams, the
open RSS being the median of the readings taken while all were open. Inter-event delay: each gap
between consecutive ``content_block_delta`` arrivals minus the emulator's pacing, through the
gateway and (control group) straight from the emulator at the same time. The delay the gateway
adds is estimated per gap, paired in time (:func:`added_delay`): stalls of the emulator, the client
or the whole machine lengthen the gaps of both groups in the same second and cancel out; the plain
difference of the two groups' p99s is reported too (it is dominated by a few machine-wide stalls
that hit the groups unevenly).
Phase 2: per kind count, errors and latency; the RSS slope is a least-squares line through the
samples of the last ``window`` seconds of the traffic, given per 10 minutes in MB and in percent
of the mean RSS over that window.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from bench.report import percentile
from bench.soak_mixed import MixedResult
from bench.soak_requests import Exchange
from bench.soak_streams import HoldResult

MIN_SLOPE_SAMPLES: Final = 10
PAIR_BUCKET_S: Final = 1.0
MIN_REFERENCE_GAPS: Final = 10
TEN_MINUTES: Final = 600.0


def linear_fit(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Least-squares ``(slope, intercept)`` of ``ys`` over ``xs`` (NaN for fewer than 2 points)."""
    n = len(xs)
    if n < 2 or n != len(ys):
        return math.nan, math.nan
    mx, my = sum(xs) / n, sum(ys) / n
    var = sum((x - mx) ** 2 for x in xs)
    if var == 0:
        return math.nan, math.nan
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var
    return slope, my - slope * mx


def _ms(values: Iterable[float], q: float) -> float:
    return percentile(list(values), q) * 1e3


def errors_by_kind(exchanges: Iterable[Exchange]) -> dict[str, int]:
    return dict(Counter(f"{e.kind}: {e.error}" for e in exchanges if e.error))


def gap_figures(
    exchanges: Sequence[Exchange], interval_s: float, start: float = -math.inf, end: float = math.inf
) -> dict[str, float]:
    """Gap minus pacing, in ms, over the delta-to-delta gaps of the successful streams that
    ended within [start, end]."""
    excess = [g - interval_s for e in exchanges if e.error is None for g in e.gaps(start, end)]
    return {
        "gaps": len(excess),
        "excess_p50_ms": _ms(excess, 50),
        "excess_p99_ms": _ms(excess, 99),
        "excess_max_ms": max(excess) * 1e3 if excess else math.nan,
    }


def _group(exchanges: Sequence[Exchange], interval_s: float, steady: tuple[float, float]) -> dict[str, Any]:
    ok = [e for e in exchanges if e.error is None]
    return {
        "streams": len(exchanges),
        "ok": len(ok),
        "errors": len(exchanges) - len(ok),
        "error_kinds": errors_by_kind(exchanges),
        "duration_p50_s": percentile([e.latency for e in ok], 50),
        **gap_figures(exchanges, interval_s),
        "all_open": gap_figures(exchanges, interval_s, *steady),
    }


def added_delay(
    gateway: Sequence[Exchange],
    direct: Sequence[Exchange],
    interval_s: float,
    start: float = -math.inf,
    end: float = math.inf,
) -> dict[str, float]:
    """The delay the gateway adds to each inter-event gap, paired in time with the control group:
    a gateway stream's gap minus the median gap of the direct streams whose gap ended in the same
    :data:`PAIR_BUCKET_S` (what the emulator, the client and the machine did at that moment), in
    ms. Gaps of seconds with fewer than :data:`MIN_REFERENCE_GAPS` direct gaps are left out
    (``unpaired``). Without a control group, the gap minus the pacing."""
    reference: dict[int, list[float]] = {}
    for e in direct:
        if e.error is None:
            for at, gap in e.timed_gaps(start, end):
                reference.setdefault(int(at // PAIR_BUCKET_S), []).append(gap)
    medians = {k: statistics.median(v) for k, v in reference.items() if len(v) >= MIN_REFERENCE_GAPS}
    added, unpaired = [], 0
    for e in gateway:
        if e.error is None:
            for at, gap in e.timed_gaps(start, end):
                base = medians.get(int(at // PAIR_BUCKET_S)) if direct else interval_s
                if base is None:
                    unpaired += 1
                else:
                    added.append(gap - base)
    return {
        "gaps": len(added),
        "unpaired": unpaired,
        "p50_ms": _ms(added, 50),
        "p99_ms": _ms(added, 99),
        "max_ms": max(added) * 1e3 if added else math.nan,
    }


def _p99_difference(gateway: dict[str, Any], direct: dict[str, Any]) -> float:
    return float(gateway["excess_p99_ms"]) - float(direct["excess_p99_ms"])


def hold_figures(
    result: HoldResult, cfg: dict[str, Any], rss_idle_mb: float, rss_after_mb: float
) -> dict[str, Any]:
    steady = (result.all_open_at or math.inf, result.first_end_at or -math.inf)
    gateway = _group(result.gateway, cfg["interval_s"], steady)
    direct = _group(result.direct, cfg["interval_s"], steady)
    rss_open = statistics.median(result.rss_open_mb) if result.rss_open_mb else math.nan
    added = added_delay(result.gateway, result.direct, cfg["interval_s"], *steady)
    return {
        "config": cfg,
        "gateway": gateway,
        "direct": direct,
        # while every stream was open (the headline), and over the whole phase (the ramp included)
        "added_delay_all_open": added,
        "added_delay_whole": added_delay(result.gateway, result.direct, cfg["interval_s"]),
        "p99_added_inter_event_delay_ms": added["p99_ms"],
        # the plain comparison: p99 of the gateway's gap excess minus the control group's
        "p99_difference_all_open_ms": _p99_difference(gateway["all_open"], direct["all_open"]),
        "p99_difference_whole_ms": _p99_difference(gateway, direct),
        "rss_idle_mb": rss_idle_mb,
        "rss_open_mb": rss_open,
        "rss_open_peak_mb": max(result.rss_open_mb, default=math.nan),
        "rss_open_readings": len(result.rss_open_mb),
        "rss_after_mb": rss_after_mb,
        "kb_per_open_stream": (rss_open - rss_idle_mb) * 1024 / cfg["streams"]
        if cfg["streams"]
        else math.nan,
        "files_open_max": max(result.files_open, default=0),
        "emulator_rss_open_mb": statistics.median(result.emulator_rss_open_mb)
        if result.emulator_rss_open_mb
        else math.nan,
        "all_open_s": result.all_open_s,
        "most_open": result.most_open,
    }


def _kind_row(exchanges: Sequence[Exchange]) -> dict[str, Any]:
    ok = [e for e in exchanges if e.error is None]
    return {
        "requests": len(exchanges),
        "errors": len(exchanges) - len(ok),
        "p50_ms": _ms((e.latency for e in ok), 50),
        "p99_ms": _ms((e.latency for e in ok), 99),
        "ttfb_p50_ms": _ms((e.ttfb for e in ok if e.ttfb is not None), 50),
        "ttfb_p99_ms": _ms((e.ttfb for e in ok if e.ttfb is not None), 99),
    }


def slope_figures(
    samples: Sequence[tuple[float, float, int]], seconds: float, window_s: float
) -> dict[str, Any]:
    """RSS line over the samples within the last ``window_s`` of ``seconds`` of traffic."""
    start = max(0.0, seconds - window_s)
    used = [(t, rss) for t, rss, _ in samples if start <= t <= seconds]
    xs, ys = [t for t, _ in used], [rss for _, rss in used]
    slope, _ = linear_fit(xs, ys)
    mean = sum(ys) / len(ys) if ys else math.nan
    per_10 = slope * TEN_MINUTES
    return {
        "window_s": seconds - start,
        "samples": len(used),
        "mean_mb": mean,
        "first_mb": ys[0] if ys else math.nan,
        "last_mb": ys[-1] if ys else math.nan,
        "min_mb": min(ys, default=math.nan),
        "max_mb": max(ys, default=math.nan),
        "slope_mb_per_10min": per_10,
        "slope_pct_per_10min": 100.0 * per_10 / mean if mean else math.nan,
        "fitted_change_mb": slope * (seconds - start),
    }


def mixed_figures(result: MixedResult, cfg: dict[str, Any], window_s: float) -> dict[str, Any]:
    by_kind: dict[str, list[Exchange]] = {}
    for e in result.exchanges:
        by_kind.setdefault(e.kind, []).append(e)
    unpaced = [e for e in result.exchanges if e.error is None and not e.kind.startswith("stream")]
    streams = [e for e in result.exchanges if e.error is None and e.kind.startswith("stream")]
    in_traffic = [s for s in result.samples if s[0] <= result.seconds]
    return {
        "config": cfg,
        "seconds": result.seconds,
        "requests": len(result.exchanges),
        "achieved_rate": len(result.exchanges) / result.seconds if result.seconds else math.nan,
        "errors": sum(1 for e in result.exchanges if e.error),
        "error_kinds": errors_by_kind(result.exchanges),
        "late_starts": result.late_starts,
        "kinds": {name: _kind_row(ex) for name, ex in sorted(by_kind.items())},
        "unpaced_p50_ms": _ms((e.latency for e in unpaced), 50),
        "unpaced_p99_ms": _ms((e.latency for e in unpaced), 99),
        "stream_first_event_p50_ms": _ms((e.ttfb for e in streams if e.ttfb is not None), 50),
        "stream_first_event_p99_ms": _ms((e.ttfb for e in streams if e.ttfb is not None), 99),
        "rss": slope_figures(result.samples, result.seconds, window_s),
        "files_max": max((f for _, _, f in in_traffic), default=0),
        "rss_samples": [[round(t, 2), round(r, 2), f] for t, r, f in result.samples],
        "emulator_rss_last_mb": result.emulator_rss_mb[-1] if result.emulator_rss_mb else math.nan,
    }


@dataclass(frozen=True)
class Check:
    name: str
    measured: float
    limit: float
    unit: str
    at_least: bool = False  # the target is measured >= limit (else <=)
    evaluated: bool = True  # False: not enough data to judge (reported, not counted)

    @property
    def passed(self) -> bool:
        if not self.evaluated:
            return True
        if math.isnan(self.measured):
            return False
        return self.measured >= self.limit if self.at_least else self.measured <= self.limit


@dataclass(frozen=True)
class Limits:
    slope_pct: float  # |RSS slope| per 10 minutes, % of the mean RSS
    slope_min_window_s: float  # a shorter window is reported, not judged


def checks(
    hold: dict[str, Any] | None, mixed: dict[str, Any] | None, log: dict[str, Any], limits: Limits
) -> list[Check]:
    out: list[Check] = []
    if hold is not None:
        streams = hold["config"]["streams"]
        out.append(
            Check(
                "phase 1: stream errors (gateway + control)",
                hold["gateway"]["errors"] + hold["direct"]["errors"],
                0,
                "",
            )
        )
        out.append(
            Check("phase 1: gateway streams open at once", hold["most_open"], streams, "", at_least=True)
        )
        out.append(
            Check("phase 1: memory per open stream measured", hold["rss_open_readings"], 1, "", at_least=True)
        )
    if mixed is not None:
        out.append(Check("phase 2: unexpected outcomes", mixed["errors"], 0, ""))
        rss = mixed["rss"]
        enough = rss["samples"] >= MIN_SLOPE_SAMPLES and rss["window_s"] >= limits.slope_min_window_s
        name = f"phase 2: |RSS slope|, last {rss['window_s'] / 60:.1f} min, % of mean per 10 min"
        if not enough:
            name += " (too short to judge)"
        out.append(Check(name, abs(rss["slope_pct_per_10min"]), limits.slope_pct, "%", evaluated=enough))
    out.append(Check("gateway log: ERROR lines and tracebacks", log["errors"] + log["tracebacks"], 0, ""))
    return out


def _f(v: float, digits: int = 2) -> str:
    return "-" if isinstance(v, float) and math.isnan(v) else f"{v:.{digits}f}"


def cpu_text(cpu: dict[str, float] | None) -> str:
    if not cpu:
        return "  CPU: not measured"
    roles = ", ".join(f"{name} {pct:.0f}" for name, pct in cpu.items() if name != "machine")
    return f"  CPU, % of one core: {roles}; whole machine {cpu.get('machine', math.nan):.0f} (all cores)"


def hold_text(h: dict[str, Any]) -> list[str]:
    c = h["config"]
    rows = [
        f"Phase 1: {c['streams']} streams through the gateway + {c['control']} straight to the emulator, "
        f"opened over {c['ramp_s']:g}s; {c['deltas']} deltas x {c['interval_s']:g}s = {c['deltas'] * c['interval_s']:g}s each",
        f"{'group':>8} | {'streams':>7} {'ok':>6} {'errors':>6} | {'length s':>8} | {'gap - pacing, ms: p50':>21} {'p99':>7} {'max':>7}",
    ]
    for name in ("gateway", "direct"):
        g, w = h[name], h[name]["all_open"]
        rows.append(
            f"{name:>8} | {g['streams']:>7} {g['ok']:>6} {g['errors']:>6} | {_f(g['duration_p50_s']):>8} | "
            f"{_f(g['excess_p50_ms']):>21} {_f(g['excess_p99_ms']):>7} {_f(g['excess_max_ms']):>7}  (whole phase)"
        )
        rows.append(
            f"{'':>8} | {'':>7} {'':>6} {'':>6} | {'':>8} | "
            f"{_f(w['excess_p50_ms']):>21} {_f(w['excess_p99_ms']):>7} {_f(w['excess_max_ms']):>7}  (all open)"
        )
        if g["error_kinds"]:
            rows.append(f"{'':>8}   errors: {g['error_kinds']}")
    a, w = h["added_delay_all_open"], h["added_delay_whole"]
    rows += [
        f"  added inter-event delay (each gateway gap - the direct gaps' median in the same second), "
        f"while all were open: p50 {_f(a['p50_ms'])} ms, p99 {_f(a['p99_ms'])} ms, max {_f(a['max_ms'])} ms "
        f"({a['gaps']} gaps, {a['unpaired']} unpaired); whole phase p99 {_f(w['p99_ms'])} ms",
        f"  gateway p99 - direct p99 of the gap excess: {_f(h['p99_difference_all_open_ms'])} ms while all were open, "
        f"{_f(h['p99_difference_whole_ms'])} ms over the whole phase",
        f"  gateway RSS: idle {_f(h['rss_idle_mb'], 1)} MB, all {c['streams']} open {_f(h['rss_open_mb'], 1)} MB "
        f"(median of {h['rss_open_readings']} readings over {h['all_open_s']:.1f}s; peak {_f(h['rss_open_peak_mb'], 1)}), "
        f"after {_f(h['rss_after_mb'], 1)} MB",
        f"  memory per open stream: {_f(h['kb_per_open_stream'], 1)} KB; most open at once {h['most_open']}; "
        f"gateway open files up to {h['files_open_max']}; emulator RSS {_f(h['emulator_rss_open_mb'], 1)} MB",
        cpu_text(h.get("cpu_pct")),
    ]
    return rows


def _cpu_per_request(m: dict[str, Any]) -> str:
    cpu = m.get("cpu_pct") or {}
    if "gateway" not in cpu or not m["requests"]:
        return "CPU per request not measured"
    ms = cpu["gateway"] / 100.0 * m["cpu_wall_s"] * 1e3 / m["requests"]
    return f"gateway CPU {ms:.2f} ms per request (the mix, streams included)"


def mixed_text(m: dict[str, Any]) -> list[str]:
    c, rss = m["config"], m["rss"]
    rows = [
        f"Phase 2: mixed traffic for {m['seconds'] / 60:.1f} min at {c['rate']:g} req/s "
        f"({m['requests']} requests, {_f(m['achieved_rate'], 1)}/s; {m['late_starts']} started >1s late)",
        f"{'kind':>15} | {'requests':>8} {'errors':>6} | {'p50 ms':>8} {'p99 ms':>8} | {'TTFB p50':>8} {'p99':>8}",
    ]
    for name, k in m["kinds"].items():
        rows.append(
            f"{name:>15} | {k['requests']:>8} {k['errors']:>6} | {_f(k['p50_ms']):>8} {_f(k['p99_ms']):>8} | "
            f"{_f(k['ttfb_p50_ms']):>8} {_f(k['ttfb_p99_ms']):>8}"
        )
    if m["error_kinds"]:
        rows.append(f"  unexpected outcomes: {m['error_kinds']}")
    rows += [
        f"  latency p50/p99: non-stream kinds {_f(m['unpaced_p50_ms'])} / {_f(m['unpaced_p99_ms'])} ms; "
        f"streams' first event {_f(m['stream_first_event_p50_ms'])} / {_f(m['stream_first_event_p99_ms'])} ms "
        "(stream lengths are the emulator's pacing)",
        f"  gateway: {'a fresh process' if m.get('fresh_gateway') else 'phase 1 process'}, idle RSS "
        f"{_f(m.get('rss_idle_mb', math.nan), 1)} MB after warm-up; {_cpu_per_request(m)}",
        cpu_text(m.get("cpu_pct")),
        f"  gateway RSS over the last {rss['window_s'] / 60:.1f} min ({rss['samples']} samples every {c['sample_s']:g}s): "
        f"mean {_f(rss['mean_mb'], 1)} MB, {_f(rss['first_mb'], 1)} -> {_f(rss['last_mb'], 1)} MB "
        f"(min {_f(rss['min_mb'], 1)}, max {_f(rss['max_mb'], 1)})",
        f"  RSS slope: {_f(rss['slope_mb_per_10min'], 2)} MB per 10 min = {_f(rss['slope_pct_per_10min'], 2)}% of the mean "
        f"(fitted change over the window {_f(rss['fitted_change_mb'], 2)} MB); gateway open files up to {m['files_max']}",
    ]
    return rows


def checks_text(items: Sequence[Check]) -> list[str]:
    rows = ["Targets:"]
    for c in items:
        mark = "SKIP" if not c.evaluated else "PASS" if c.passed else "MISS"
        op = ">=" if c.at_least else "<="
        rows.append(
            f"  [{mark}] {c.name:<66} measured {_f(float(c.measured)):>8}{c.unit} target {op} {c.limit:g}{c.unit}"
        )
    return rows
