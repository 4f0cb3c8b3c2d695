"""Statistics and the printed/JSON report of the provider-latency benchmark."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from bench.latency_paths import (
    MODEL,
    MODES,
    NOISE_PCT,
    TARGET_DELTAS,
    Samples,
)
from bench.report import percentile

# --- results --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PathStats:
    """N sequential requests on one path (direct or through the gateway)."""

    requests: int
    ok: int
    errors: dict[str, int]
    p50_ms: float
    p99_ms: float
    mean_ms: float
    answer: int  # text deltas per stream / text characters per Message (the most common value)
    answers: dict[int, int]
    response_bytes: int  # median body size
    cpu_ms_per_request: dict[str, float]  # role -> CPU ms per request during the run
    other_processes_pct: float  # processes outside the benchmark, % of one core

    @classmethod
    def of(cls, samples: Samples, requests: int) -> PathStats:
        lat = samples.latency
        ok = len(lat)
        return cls(
            requests=requests,
            ok=ok,
            errors=dict(samples.errors),
            p50_ms=percentile(lat, 50) * 1e3,
            p99_ms=percentile(lat, 99) * 1e3,
            mean_ms=(sum(lat) / ok * 1e3) if ok else math.nan,
            answer=samples.answers.most_common(1)[0][0] if samples.answers else -1,
            answers=dict(samples.answers),
            response_bytes=int(percentile(samples.sizes, 50)) if samples.sizes else 0,
            cpu_ms_per_request={role: ms / max(1, requests) for role, ms in samples.cpu_ms.items()},
            other_processes_pct=samples.other_pct_s / samples.wall_s if samples.wall_s > 0 else 0.0,
        )


@dataclass(frozen=True)
class Row:
    provider: str
    mode: str
    direct: PathStats
    gateway: PathStats

    @property
    def added_p50_ms(self) -> float:
        return self.gateway.p50_ms - self.direct.p50_ms

    @property
    def p50_ratio(self) -> float:
        return self.gateway.p50_ms / self.direct.p50_ms if self.direct.p50_ms > 0 else math.nan


@dataclass(frozen=True)
class ProviderGap:
    """Bedrock versus first party for one mode: the added p50 of each, their ratio and difference."""

    mode: str
    added_bedrock_ms: float
    added_first_party_ms: float
    gateway_cpu_bedrock_ms: float = math.nan  # gateway CPU per request (less sensitive to noise)
    gateway_cpu_first_party_ms: float = math.nan

    @property
    def ratio(self) -> float:
        if self.added_first_party_ms <= 0 or math.isnan(self.added_first_party_ms):
            return math.nan
        return self.added_bedrock_ms / self.added_first_party_ms

    @property
    def difference_ms(self) -> float:
        return self.added_bedrock_ms - self.added_first_party_ms

    @property
    def cpu_ratio(self) -> float:
        if not self.gateway_cpu_first_party_ms > 0:
            return math.nan
        return self.gateway_cpu_bedrock_ms / self.gateway_cpu_first_party_ms


def provider_gaps(rows: Sequence[Row]) -> list[ProviderGap]:
    by_key = {(r.provider, r.mode): r for r in rows}
    gaps = []
    for mode in MODES:
        bedrock, first_party = by_key.get(("bedrock", mode)), by_key.get(("anthropic", mode))
        if bedrock is not None and first_party is not None:
            gaps.append(
                ProviderGap(
                    mode,
                    bedrock.added_p50_ms,
                    first_party.added_p50_ms,
                    bedrock.gateway.cpu_ms_per_request.get("gateway", math.nan),
                    first_party.gateway.cpu_ms_per_request.get("gateway", math.nan),
                )
            )
    return gaps


@dataclass
class Report:
    environment: dict[str, Any]
    rows: list[Row]

    @property
    def gaps(self) -> list[ProviderGap]:
        return provider_gaps(self.rows)

    @property
    def errors(self) -> int:
        return sum(sum(p.errors.values()) for r in self.rows for p in (r.direct, r.gateway))

    def notes(self) -> list[str]:
        notes = []
        for r in self.rows:
            answers = {r.direct.answer, r.gateway.answer}
            if len(answers) > 1 or len(r.direct.answers) > 1 or len(r.gateway.answers) > 1:
                notes.append(
                    f"{r.provider} {r.mode}: answers differ between requests or paths "
                    f"(direct {r.direct.answers}, gateway {r.gateway.answers})"
                )
            if r.mode == "stream" and r.direct.answer != TARGET_DELTAS:
                notes.append(f"{r.provider} stream: {r.direct.answer} text deltas, not {TARGET_DELTAS}")
            for name, p in (("direct", r.direct), ("gateway", r.gateway)):
                if p.errors:
                    notes.append(f"{r.provider} {r.mode} {name}: {p.requests - p.ok} failed {p.errors}")
                if p.other_processes_pct >= NOISE_PCT:
                    notes.append(
                        f"{r.provider} {r.mode} {name}: processes outside the benchmark used "
                        f"{p.other_processes_pct:.0f}% of a core"
                    )
        return notes

    def as_dict(self) -> dict[str, Any]:
        return {
            "environment": self.environment,
            "rows": [
                {
                    "provider": r.provider,
                    "mode": r.mode,
                    "direct": asdict(r.direct),
                    "gateway": asdict(r.gateway),
                    "added_p50_ms": r.added_p50_ms,
                    "p50_ratio": r.p50_ratio,
                }
                for r in self.rows
            ],
            "bedrock_vs_first_party": [
                {**asdict(g), "ratio": g.ratio, "difference_ms": g.difference_ms, "cpu_ratio": g.cpu_ratio}
                for g in self.gaps
            ],
            "errors": self.errors,
            "notes": self.notes(),
        }

    def render(self) -> str:
        env = self.environment
        stream_answers = sorted({r.direct.answer for r in self.rows if r.mode == "stream"})
        message_answers = sorted({r.direct.answer for r in self.rows if r.mode == "nonstream"})
        answers = [f"{'/'.join(map(str, stream_answers))} text deltas per stream"] if stream_answers else []
        if message_answers:
            answers.append(f"{'/'.join(map(str, message_answers))}-char text per Message")
        pinning = (
            "gateways pinned to CPU {gateway}, client + emulators to CPU {others}".format(
                **env["pinned_cpus"]
            )
            if env["pinned_cpus"]
            else "no pinning"
        )
        lines = [
            "switchyard provider latency: what the gateway adds, Bedrock path vs first-party path",
            f"  concurrency 1: {env['requests']} sequential requests per path after {env['warmup']} "
            f"warm-up, the paths taking turns in blocks of {env['block']}",
            f"  request: {MODEL}, {env['request_bytes']} B",
            f"  answer: {', '.join(answers)} (scripted, the same on every path)",
            f"  CPU: {env['usable_cpus']} usable core(s); client, emulator and gateway in separate "
            f"processes ({env['event_loop']}),",
            f"    the other provider's pair idle; {pinning}",
            "",
            f"{'':20} | {'direct (emulator)':^22} | {'gateway -> emulator':^22} |",
            f"{'provider':<10} {'mode':<9} | {'p50':>7} {'p99':>7} {'resp':>6} | {'p50':>7} {'p99':>7} "
            f"{'resp':>6} | {'+p50':>7} {'p50 x':>6} {'gw CPU':>7}",
        ]
        lines.append("-" * len(lines[-1]))
        for r in self.rows:
            d, g = r.direct, r.gateway
            lines.append(
                f"{r.provider:<10} {r.mode:<9} | {_f(d.p50_ms)} {_f(d.p99_ms)} {_kb(d.response_bytes)} | "
                f"{_f(g.p50_ms)} {_f(g.p99_ms)} {_kb(g.response_bytes)} | {_f(r.added_p50_ms)} "
                f"{_f(r.p50_ratio, 6)} {_f(g.cpu_ms_per_request.get('gateway', math.nan))}"
            )
        lines += [
            "ms; latency = POST to last body byte (aiohttp client); resp = median response body (KB);",
            "+p50 = gateway p50 - direct p50; p50 x = gateway p50 / direct p50;",
            "gw CPU = gateway process CPU ms per request during the through-gateway run",
        ]
        if self.gaps:
            lines += ["", "Bedrock vs first party, added p50 (gateway - direct) and gateway CPU per request:"]
            for gap in self.gaps:
                lines.append(
                    f"  {gap.mode:<9}  bedrock {gap.added_bedrock_ms:+.3f} ms, first-party "
                    f"{gap.added_first_party_ms:+.3f} ms: ratio {_n(gap.ratio)}, difference "
                    f"{gap.difference_ms:+.3f} ms; CPU {_n(gap.gateway_cpu_bedrock_ms)} vs "
                    f"{_n(gap.gateway_cpu_first_party_ms)} ms: ratio {_n(gap.cpu_ratio)}"
                )
        notes = self.notes()
        if notes:
            lines += ["", "NOTES:", *(f"  {n}" for n in notes)]
        return "\n".join(lines)


def _f(v: float, width: int = 7) -> str:
    return f"{'-':>{width}}" if math.isnan(v) else f"{v:>{width}.3f}"


def _n(v: float) -> str:
    return "-" if math.isnan(v) else f"{v:.3f}"


def _kb(n: int) -> str:
    return f"{n / 1024:>6.1f}"
