"""Limits checked before every model call, each ending the run with its own terminal and report.

``check_guardrails`` runs first; the context blocking limit (``check_blocking``) runs after the
context layers, on the history they produced.
"""

from __future__ import annotations

from loop.config import LoopConfig
from loop.state import LoopState
from loop.transitions import BlockingLimit, Guardrail, GuardrailKind, GuardrailReport, MaxTurns, Terminal

COMPACT_SOURCE = "compact"


def check_guardrails(state: LoopState, config: LoopConfig, now: float) -> Terminal | None:
    """The first limit ``state`` has reached, or ``None`` when the next call may go ahead.

    Order: max_turns, billed tokens, cache-read tokens, cost, wall clock, consecutive error turns,
    repeated tool calls.
    """
    turns = state.turn_count
    if turns >= config.max_turns:
        return MaxTurns(config.max_turns)
    billed = state.usage.billed
    if config.max_total_tokens is not None and billed >= config.max_total_tokens:
        return _guardrail(
            GuardrailKind.TOKENS,
            config.max_total_tokens,
            billed,
            turns,
            f"{billed} billed tokens (input + cache writes + output), limit {config.max_total_tokens}",
        )
    reads = state.usage.cache_read_input_tokens
    if config.max_cache_read_tokens is not None and reads >= config.max_cache_read_tokens:
        return _guardrail(
            GuardrailKind.CACHE_READ_TOKENS,
            config.max_cache_read_tokens,
            reads,
            turns,
            f"{reads} cache-read tokens, limit {config.max_cache_read_tokens}",
        )
    cost = state.usage.cost_usd
    if config.max_cost_usd is not None and cost >= config.max_cost_usd:
        return _guardrail(
            GuardrailKind.COST,
            config.max_cost_usd,
            cost,
            turns,
            f"${cost:.4f} spent on model calls, limit ${config.max_cost_usd:g}",
        )
    elapsed = now - state.started_at
    if config.max_wall_clock_s is not None and elapsed >= config.max_wall_clock_s:
        return _guardrail(
            GuardrailKind.WALL_CLOCK,
            config.max_wall_clock_s,
            elapsed,
            turns,
            f"{elapsed:.1f}s elapsed, limit {config.max_wall_clock_s:g}s",
        )
    errors = state.consecutive_error_turns
    if config.max_consecutive_errors is not None and errors >= config.max_consecutive_errors:
        return _guardrail(
            GuardrailKind.CONSECUTIVE_ERRORS,
            config.max_consecutive_errors,
            errors,
            turns,
            f"{errors} turns in a row where every tool call failed",
        )
    repeats = state.repeated_tool_calls
    if config.max_repeated_tool_calls is not None and repeats >= config.max_repeated_tool_calls:
        return _guardrail(
            GuardrailKind.REPEATED_TOOL_CALLS,
            config.max_repeated_tool_calls,
            repeats,
            turns,
            f"the same tool call was made {repeats} times in a row: {state.last_tool_signature}",
        )
    return None


def check_blocking(estimated: int, limit: int, config: LoopConfig) -> BlockingLimit | None:
    """The hard limit on the request about to be sent (after the context layers ran); not applied
    to the compaction agent (``source="compact"``), which must be able to run."""
    if config.source != COMPACT_SOURCE and estimated >= limit:
        return BlockingLimit(estimated, limit)
    return None


def _guardrail(kind: GuardrailKind, limit: float, observed: float, turns: int, detail: str) -> Guardrail:
    return Guardrail(kind, GuardrailReport(limit=limit, observed=observed, turns=turns, detail=detail))
