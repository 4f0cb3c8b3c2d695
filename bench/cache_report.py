"""Per-turn records, per-provider results and the report of the cache-efficiency benchmark."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

import anthropic

from bench.cc_session import DEFAULT_FIXTURE, ClaudeCodeSession
from emulators.upstreams import PROVIDERS

CLIENT_KEY: Final = "sk-bench-cache-efficiency"
DEFAULT_TURNS: Final = 30
DEFAULT_SWITCH_TURN: Final = 20
DEFAULT_SWITCH_MODEL: Final = "claude-opus-4-5"
FROM_TURN: Final = 3
CM: Final = "context-management-2025-06-27"
EFFORT: Final = "effort-2025-11-24"
MID_CONVERSATION_SYSTEM: Final = "mid-conversation-system-2026-04-07"
# turn -> betas the client leaves out of anthropic-beta on that turn (and sends again on the next)
DEFAULT_TOGGLES: Final[Mapping[int, tuple[str, ...]]] = {
    4: (CM,),
    5: (CM,),
    8: (EFFORT,),
    11: (CM, EFFORT),
    16: (EFFORT,),
    22: (CM,),
    24: (CM,),
    27: (EFFORT,),
}
TARGET_SHARE: Final = 0.95
# upstreams whose prompt cache keys on Claude Code's billing header block (normalise.py; the
# first-party API keeps it out, which is why Claude Code may vary its cch= on every request)
BILLING_IN_KEY: Final = frozenset({"bedrock", "vertex"})
FALLBACK_TOOL: Final = "Bash"
BOOKKEEPING_TIMEOUT_S: Final = 10.0


@dataclass
class Options:
    turns: int = DEFAULT_TURNS
    providers: list[str] = field(default_factory=lambda: list(PROVIDERS))
    switch_turn: int = DEFAULT_SWITCH_TURN  # 0: no model switch
    switch_model: str = DEFAULT_SWITCH_MODEL
    toggles: dict[int, tuple[str, ...]] = field(default_factory=lambda: dict(DEFAULT_TOGGLES))
    fixture: Path = DEFAULT_FIXTURE
    json_out: str | None = None
    per_turn: bool = False

    @property
    def switch_turns(self) -> tuple[int, ...]:
        if not self.switch_turn or self.switch_turn > self.turns:
            return ()
        return tuple(n for n in (self.switch_turn, self.switch_turn + 1) if n <= self.turns)

    def model_for(self, turn: int, base: str) -> str:
        return self.switch_model if turn == self.switch_turn else base

    def expected_break(self, turn: int) -> str | None:
        if turn == 1:
            return "first_request"
        return "model_changed" if turn in self.switch_turns else None


# --- one turn, one provider -----------------------------------------------------------------------


@dataclass
class TurnRecord:
    turn: int
    model: str
    dropped_betas: list[str]
    scenario: str
    stop_reason: str
    tool: str | None
    input_tokens: int
    cache_read: int
    cache_write: int
    output_tokens: int
    upstream_requests: int
    upstream_model: str
    upstream_betas: list[str]
    billing: str
    latched: list[str]  # dropped betas that reached the upstream anyway
    latch_expected: list[str]  # dropped betas the upstream's beta policy accepts
    ceiling_read: int
    emulator_total: int
    prefix_changes: list[str]
    gateway_break: str | None
    expected_break: str | None
    detector_betas: str | None = None  # the betas hash the gateway's session store kept for this turn

    @property
    def total_input(self) -> int:
        return self.input_tokens + self.cache_read + self.cache_write

    @property
    def latch_ok(self) -> bool:
        return set(self.latch_expected) <= set(self.latched)


@dataclass
class ProviderResult:
    provider: str
    turns: list[TurnRecord]
    switch_turns: tuple[int, ...]
    billing_in_key: bool
    metric_breaks: dict[str, int]  # gateway_cache_breaks_total by reason at the end
    session: dict[str, Any]  # GET /v1/sessions/{id} at the end

    # -- which turns count ------------------------------------------------------------------------
    @property
    def measured(self) -> list[TurnRecord]:
        return [t for t in self.turns if t.turn >= FROM_TURN and t.turn not in self.switch_turns]

    @property
    def excluded(self) -> list[int]:
        return [t.turn for t in self.turns if t.turn < FROM_TURN or t.turn in self.switch_turns]

    # -- the figures ------------------------------------------------------------------------------
    @staticmethod
    def _share(turns: Sequence[TurnRecord], part: Callable[[TurnRecord], int]) -> float:
        total = sum(t.total_input for t in turns)
        return sum(part(t) for t in turns) / total if total else float("nan")

    @property
    def cache_share(self) -> float:
        return self._share(self.measured, lambda t: t.cache_read)

    @property
    def ceiling_share(self) -> float:
        return self._share(self.measured, lambda t: t.ceiling_read)

    @property
    def cache_share_with_switch(self) -> float:
        return self._share([t for t in self.turns if t.turn >= FROM_TURN], lambda t: t.cache_read)

    @property
    def gateway_breaks(self) -> list[TurnRecord]:
        """Turns whose upstream prefix changed for a reason other than the injected model switch."""
        out = []
        for t in self.turns:
            unexplained = [
                c for c in t.prefix_changes if not (c.startswith("model ") and t.turn in self.switch_turns)
            ]
            if unexplained:
                out.append(t)
        return out

    @property
    def reads_below_ceiling(self) -> list[int]:
        return [t.turn for t in self.measured if t.cache_read < t.ceiling_read]

    @property
    def expected_breaks(self) -> dict[int, str]:
        return {t.turn: t.expected_break for t in self.turns if t.expected_break is not None}

    @property
    def detected_breaks(self) -> dict[int, str]:
        return {t.turn: t.gateway_break for t in self.turns if t.gateway_break is not None}

    @property
    def classified(self) -> tuple[int, int]:
        """(breaks classified as expected, breaks expected or detected)."""
        expected, detected = self.expected_breaks, self.detected_breaks
        turns = set(expected) | set(detected)
        return sum(1 for n in turns if expected.get(n) == detected.get(n)), len(turns)

    @property
    def classified_share(self) -> float:
        ok, total = self.classified
        return ok / total if total else 1.0

    @property
    def toggled(self) -> list[TurnRecord]:
        return [t for t in self.turns if t.dropped_betas]

    @property
    def latch_ok(self) -> tuple[int, int]:
        toggled = self.toggled
        return sum(1 for t in toggled if t.latch_ok), len(toggled)

    @property
    def billing_values(self) -> int:
        return len({t.billing for t in self.turns})

    @property
    def beta_orders(self) -> int:
        """Distinct orders of the same upstream beta set (order changes are not counted as breaks)."""
        by_set: dict[frozenset[str], set[tuple[str, ...]]] = {}
        for t in self.turns:
            by_set.setdefault(frozenset(t.upstream_betas), set()).add(tuple(t.upstream_betas))
        return max((len(v) for v in by_set.values()), default=0)

    @property
    def detector_drift(self) -> list[int]:
        """Turns after which the gateway's break detector remembers a different beta set than for the
        previous turn although the upstream received the same set: a later miss on the next turn
        would be blamed on ``betas_changed``."""
        drift = []
        for before, after in zip(self.turns, self.turns[1:], strict=False):
            same_upstream = set(before.upstream_betas) == set(after.upstream_betas)
            if same_upstream and before.detector_betas != after.detector_betas:
                drift.append(after.turn)
        return drift

    @property
    def passed(self) -> dict[str, bool]:
        ok, total = self.latch_ok
        return {
            "cache_share": self.cache_share >= TARGET_SHARE,
            "gateway_breaks": not self.gateway_breaks,
            "classified": self.classified_share == 1.0,
            "latch": ok == total,
            "detector": not self.detector_drift,
        }

    def notes(self) -> list[str]:
        notes: list[str] = []
        p = self.provider
        for t in self.gateway_breaks:
            notes.append(f"{p} turn {t.turn}: upstream prefix changed: {'; '.join(t.prefix_changes)}")
        expected, detected = self.expected_breaks, self.detected_breaks
        for n in sorted(set(expected) | set(detected)):
            if expected.get(n) != detected.get(n):
                notes.append(
                    f"{p} turn {n}: gateway classified {detected.get(n)}, expected {expected.get(n)}"
                )
        for t in self.toggled:
            if not t.latch_ok:
                missing = sorted(set(t.latch_expected) - set(t.latched))
                notes.append(
                    f"{p} turn {t.turn}: dropped beta(s) {','.join(missing)} did not reach the upstream"
                )
        if self.reads_below_ceiling:
            notes.append(f"{p}: cache read below the ceiling on turns {self.reads_below_ceiling}")
        for t in self.turns:
            if t.upstream_requests != 1:
                notes.append(f"{p} turn {t.turn}: {t.upstream_requests} upstream requests (retries?)")
            if t.emulator_total != t.total_input:
                notes.append(
                    f"{p} turn {t.turn}: usage total {t.total_input} != emulator prompt {t.emulator_total}"
                )
        metric = {k: v for k, v in self.metric_breaks.items() if v}
        per_turn: dict[str, int] = {}
        for reason in detected.values():
            per_turn[reason] = per_turn.get(reason, 0) + 1
        if metric != per_turn:
            notes.append(f"{p}: gateway_cache_breaks_total {metric} != per-turn deltas {per_turn}")
        if self.billing_values > 1 and not self.billing_in_key:
            notes.append(
                f"{p}: billing header passed through with {self.billing_values} distinct cch values "
                "(outside the cache key on this upstream: not a break)"
            )
        if self.detector_drift:
            notes.append(
                f"{p}: the gateway's session store recorded a different betas hash after turns "
                f"{self.detector_drift} although the upstream beta set was unchanged (it records the "
                "client's betas, not the latched ones it sent)"
            )
        if self.beta_orders > 1:
            notes.append(
                f"{p}: the same upstream beta set was sent in {self.beta_orders} different orders "
                "(latched betas are appended at the end on toggled turns; compared as a set)"
            )
        return notes

    def as_dict(self) -> dict[str, Any]:
        ok, total = self.classified
        latch_ok, toggled = self.latch_ok
        return {
            "provider": self.provider,
            "cache_share": self.cache_share,
            "ceiling_share": self.ceiling_share,
            "cache_share_incl_switch_turns": self.cache_share_with_switch,
            "measured_turns": [t.turn for t in self.measured],
            "excluded_turns": self.excluded,
            "gateway_breaks": len(self.gateway_breaks),
            "gateway_break_turns": {str(t.turn): t.prefix_changes for t in self.gateway_breaks},
            "reads_below_ceiling": self.reads_below_ceiling,
            "breaks_by_reason": self.metric_breaks,
            "expected_breaks": {str(k): v for k, v in self.expected_breaks.items()},
            "detected_breaks": {str(k): v for k, v in self.detected_breaks.items()},
            "classified": {"ok": ok, "total": total, "share": self.classified_share},
            "latch": {"ok": latch_ok, "toggled_turns": toggled},
            "billing_in_key": self.billing_in_key,
            "billing_values": self.billing_values,
            "beta_orders": self.beta_orders,
            "detector_drift_turns": self.detector_drift,
            "passed": self.passed,
            "notes": self.notes(),
            "session": self.session,
            "turns": [
                {**asdict(t), "total_input": t.total_input, "latch_ok": t.latch_ok} for t in self.turns
            ],
        }


@dataclass
class Report:
    options: Options
    results: list[ProviderResult]

    def environment(self) -> dict[str, Any]:
        o = self.options
        return {
            "turns": o.turns,
            "fixture": o.fixture.name,
            "model": ClaudeCodeSession.from_fixture(o.fixture).model,
            "switch": {"turn": o.switch_turn, "model": o.switch_model, "turns": list(o.switch_turns)}
            if o.switch_turns
            else None,
            "toggles": {str(k): list(v) for k, v in sorted(o.toggles.items()) if k <= o.turns},
            "from_turn": FROM_TURN,
            "targets": {"cache_share": TARGET_SHARE, "gateway_breaks": 0, "classified": 1.0},
            "python": sys.version.split()[0],
            "anthropic_sdk": anthropic.__version__,
        }

    @property
    def passed(self) -> bool:
        return all(all(r.passed.values()) for r in self.results)

    def as_dict(self) -> dict[str, Any]:
        return {
            "environment": self.environment(),
            "providers": [r.as_dict() for r in self.results],
            "passed": self.passed,
        }

    def render(self, per_turn: bool = False) -> str:
        o = self.options
        env = self.environment()
        excluded = f"turns 1-{FROM_TURN - 1}"
        if o.switch_turns:
            excluded += f" and the model-switch turns {', '.join(map(str, o.switch_turns))}"
        lines = [
            f"switchyard cache efficiency: {o.turns}-turn Claude Code session ({env['fixture']}, "
            f"{env['model']}) through the gateway, per upstream emulator",
            f"  cache share = cache_read / (input + cache_read + cache_write), summed over turns "
            f"{FROM_TURN}-{o.turns}, excluding {excluded}",
            "  ceiling = the same share if each turn read everything but what is new since the last "
            "request of its model",
        ]
        if o.switch_turns:
            lines.append(
                f"  model switch: turn {o.switch_turn} -> {o.switch_model}, turn {o.switch_turn + 1} back "
                f"(expected breaks: model_changed on both)"
            )
        toggles = "; ".join(f"{k}: -{'/-'.join(v)}" for k, v in sorted(o.toggles.items()) if k <= o.turns)
        lines += [f"  beta toggles (left out of anthropic-beta by the client): {toggles or 'none'}", ""]
        header = (
            f"{'provider':<10} | {'cache':>6} {'ceiling':>7} {'w/ sw':>6} | {'gw breaks':>9} {'< ceil':>6} | "
            f"{'classified':>10} | {'latch':>5} {'drift':>5} | breaks by reason (gateway_cache_breaks_total)"
        )
        lines += [header, "-" * len(header)]
        for r in self.results:
            ok, total = r.classified
            lok, ltotal = r.latch_ok
            reasons = ", ".join(f"{k}={v}" for k, v in sorted(r.metric_breaks.items()) if v) or "-"
            lines.append(
                f"{r.provider:<10} | {_pct(r.cache_share)} {_pct(r.ceiling_share, 7)} "
                f"{_pct(r.cache_share_with_switch)} | {len(r.gateway_breaks):>9} {len(r.reads_below_ceiling):>6} | "
                f"{f'{ok}/{total}':>10} | {f'{lok}/{ltotal}':>5} {len(r.detector_drift):>5} | {reasons}"
            )
        lines += [
            "",
            f"targets: cache share >= {TARGET_SHARE:.0%} (turns {FROM_TURN}+, excluding the switch turns); "
            "0 gateway-caused breaks; 100% of breaks classified (turn 1 first_request, switch turns "
            "model_changed, nothing else); latched beta upstream on every toggled turn; no detector drift",
            "gw breaks = turns whose upstream prefix changed other than by the injected model switch; "
            "< ceil = measured turns reading less than the ceiling; w/ sw = cache share incl. switch turns;",
            "latch = toggled turns whose dropped beta still reached the upstream; drift = turns after which "
            "the gateway's break detector remembered other betas than the upstream received",
        ]
        for r in self.results:
            failed = [k for k, v in r.passed.items() if not v]
            lines.append(f"  {r.provider:<10} {'PASS' if not failed else 'FAIL: ' + ', '.join(failed)}")
        notes = [n for r in self.results for n in r.notes()]
        if notes:
            lines += ["", "NOTES:", *(f"  {n}" for n in notes)]
        if per_turn:
            for r in self.results:
                lines += ["", f"{r.provider}: per turn", _turn_header(), *(_turn_row(t) for t in r.turns)]
        return "\n".join(lines)


def _pct(value: float, width: int = 6) -> str:
    return f"{'-':>{width}}" if value != value else f"{value * 100:>{width - 1}.1f}%"


def _turn_header() -> str:
    return (
        f"{'turn':>4} {'model':<16} {'stop':<8} {'tool':<14} {'input':>6} {'read':>6} {'write':>6} "
        f"{'ceil':>6} {'dropped':<14} {'break':<14} changes"
    )


def _turn_row(t: TurnRecord) -> str:
    dropped = ",".join(b.split("-2")[0] for b in t.dropped_betas) or "-"
    return (
        f"{t.turn:>4} {t.model:<16} {t.stop_reason:<8} {t.tool or '-':<14} {t.input_tokens:>6} "
        f"{t.cache_read:>6} {t.cache_write:>6} {t.ceiling_read:>6} {dropped:<14} "
        f"{t.gateway_break or '-':<14} {'; '.join(t.prefix_changes) or '-'}"
    )
