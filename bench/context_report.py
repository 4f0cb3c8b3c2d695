"""Figures of the context-session benchmark (:mod:`bench.context_session`) and their table.

Per configuration, from what the upstream reported for every call (the emulator's token rule and
prompt-cache model) and the run's own events:

* model calls: the session's (main) calls and the summarisation side calls;
* billed input tokens: uncached input + cache writes (what the token guardrail counts, output
  aside), and cache reads;
* cache-read share: ``cache_read / (input + cache_read + cache_write)`` over every call;
* peak context tokens: the largest prompt a main call had (API-reported);
* cost (first-party prices of ``gateway/pricing.py``), total, of main calls 20 and 200, and the
  mean of calls 11-20 and 191-200;
* context-layer CPU per main call (process time of layers 0-3 in the loop's pass before it):
  p50, p99, max; and the offline timing of whole context passes over the longest history.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gateway.pricing import DEFAULT_TABLE
from gateway.streaming.usage import Usage
from loop.usage import TokenUsage

PROVIDER = "anthropic"


def cost(model: str, usage: TokenUsage) -> float:
    reported = Usage(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_read_input_tokens=usage.cache_read_input_tokens,
        cache_write_5m_tokens=usage.cache_creation_input_tokens,
    )
    return DEFAULT_TABLE.cost(PROVIDER, model, reported).total


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100); 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass
class ConfigResult:
    name: str
    description: str
    model: str
    calls: list[TokenUsage] = field(default_factory=list)
    """Every answered main call's usage, in order."""
    summaries: list[TokenUsage] = field(default_factory=list)
    layer_cpu_s: list[float] = field(default_factory=list)
    """Layers 0-3 process time of each pass (one per main call)."""
    compactions: dict[str, int] = field(default_factory=dict)
    """``layer/outcome`` -> count."""
    terminals: list[str] = field(default_factory=list)
    history_tokens: int = 0
    """The last main call's prompt (API-reported)."""
    pass_ms: list[float] = field(default_factory=list)
    """Offline: whole context passes over the longest history."""
    pass_history_tokens: int = 0

    def _all(self) -> list[TokenUsage]:
        return [*self.calls, *self.summaries]

    @property
    def billed_input(self) -> int:
        return sum(u.input_tokens + u.cache_creation_input_tokens for u in self._all())

    @property
    def cache_read(self) -> int:
        return sum(u.cache_read_input_tokens for u in self._all())

    @property
    def cache_share(self) -> float:
        prompt = sum(u.context_tokens for u in self._all())
        return self.cache_read / prompt if prompt else 0.0

    @property
    def peak_context(self) -> int:
        return max((u.context_tokens for u in self.calls), default=0)

    @property
    def total_cost(self) -> float:
        return sum(cost(self.model, u) for u in self._all())

    def call_cost(self, number: int) -> float | None:
        """Cost of main call ``number`` (1-based)."""
        return cost(self.model, self.calls[number - 1]) if len(self.calls) >= number else None

    def mean_cost(self, first: int, last: int) -> float | None:
        """Mean cost of main calls ``first`` to ``last`` (1-based, inclusive)."""
        if len(self.calls) < last:
            return None
        return sum(cost(self.model, u) for u in self.calls[first - 1 : last]) / (last - first + 1)

    def as_dict(self) -> dict[str, Any]:
        cpu_ms = [s * 1000 for s in self.layer_cpu_s]
        return {
            "name": self.name,
            "description": self.description,
            "main_calls": len(self.calls),
            "summariser_calls": len(self.summaries),
            "billed_input_tokens": self.billed_input,
            "cache_read_tokens": self.cache_read,
            "output_tokens": sum(u.output_tokens for u in self._all()),
            "cache_read_share": self.cache_share,
            "peak_context_tokens": self.peak_context,
            "last_context_tokens": self.history_tokens,
            "cost_usd": self.total_cost,
            "cost_call_20_usd": self.call_cost(20),
            "cost_call_200_usd": self.call_cost(200),
            "mean_cost_calls_11_20_usd": self.mean_cost(11, 20),
            "mean_cost_calls_191_200_usd": self.mean_cost(191, 200),
            "layer_cpu_ms": {
                "p50": percentile(cpu_ms, 50),
                "p99": percentile(cpu_ms, 99),
                "max": max(cpu_ms, default=0.0),
            },
            "offline_pass_ms": {
                "history_tokens": self.pass_history_tokens,
                "p50": percentile(self.pass_ms, 50),
                "p99": percentile(self.pass_ms, 99),
            },
            "compactions": dict(sorted(self.compactions.items())),
            "terminals": self.terminals,
            "per_call": [u.as_dict() for u in self.calls],
        }


def _money(value: float | None) -> str:
    return "-" if value is None else f"${value:.4f}"


def render(results: Sequence[ConfigResult], target_p99_ms: float) -> str:
    rows: list[tuple[str, Callable[[ConfigResult], str]]] = [
        ("main calls (+ summaries)", lambda r: f"{len(r.calls)} (+{len(r.summaries)})"),
        ("billed input tokens", lambda r: f"{r.billed_input:,}"),
        ("cache-read tokens", lambda r: f"{r.cache_read:,}"),
        ("cache-read share", lambda r: f"{r.cache_share:.1%}"),
        ("peak context tokens", lambda r: f"{r.peak_context:,}"),
        ("cost, whole session", lambda r: _money(r.total_cost)),
        ("cost of call 20", lambda r: _money(r.call_cost(20))),
        ("cost of call 200", lambda r: _money(r.call_cost(200))),
        ("mean cost, calls 11-20", lambda r: _money(r.mean_cost(11, 20))),
        ("mean cost, calls 191-200", lambda r: _money(r.mean_cost(191, 200))),
        ("layer CPU/call p50", lambda r: f"{percentile(r.layer_cpu_s, 50) * 1000:.3f} ms"),
        ("layer CPU/call p99", lambda r: f"{percentile(r.layer_cpu_s, 99) * 1000:.3f} ms"),
        ("compactions", lambda r: ", ".join(f"{k} {v}" for k, v in sorted(r.compactions.items())) or "-"),
    ]
    width = max(len(label) for label, _ in rows)
    columns = [max(18, len(r.name)) for r in results]
    lines = [" " * width + "  " + "  ".join(r.name.rjust(c) for r, c in zip(results, columns, strict=True))]
    for label, show in rows:
        cells = "  ".join(show(r).rjust(c) for r, c in zip(results, columns, strict=True))
        lines.append(f"{label.ljust(width)}  {cells}")
    for result in results:
        if result.pass_ms:
            p99 = percentile(result.pass_ms, 99)
            verdict = "PASS" if p99 < target_p99_ms else "MISS"
            lines.append(
                f"{result.name}: whole context pass over a {result.pass_history_tokens:,}-token history: "
                f"p50 {percentile(result.pass_ms, 50):.2f} ms, p99 {p99:.2f} ms "
                f"(target p99 < {target_p99_ms:g} ms: {verdict})"
            )
    return "\n".join(lines)
