"""Limits checked before every model call, each ending the run with its own terminal and report."""

from __future__ import annotations

from loop.config import LoopConfig
from loop.state import LoopState
from loop.tokens import context_tokens
from loop.transitions import BlockingLimit, Guardrail, GuardrailKind, GuardrailReport, MaxTurns, Terminal

COMPACT_SOURCE = "compact"


def check_guardrails(state: LoopState, config: LoopConfig, now: float) -> Terminal | None:
    """The first limit ``state`` has reached, or ``None`` when the next call may go ahead.

    Order: max_turns, total tokens, wall clock, consecutive error turns, repeated tool calls, then
    the context blocking limit (not applied to the compaction agent, which must be able to run).
    """
    turns = state.turn_count
    if turns >= config.max_turns:
        return MaxTurns(config.max_turns)
    if config.max_total_tokens is not None and state.usage.total >= config.max_total_tokens:
        return _guardrail(
            GuardrailKind.TOKENS,
            config.max_total_tokens,
            state.usage.total,
            turns,
            f"{state.usage.total} tokens used, limit {config.max_total_tokens}",
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
    if config.source != COMPACT_SOURCE:
        estimated = context_tokens(state)
        if estimated >= config.blocking_limit:
            return BlockingLimit(estimated, config.blocking_limit)
    return None


def _guardrail(kind: GuardrailKind, limit: float, observed: float, turns: int, detail: str) -> Guardrail:
    return Guardrail(kind, GuardrailReport(limit=limit, observed=observed, turns=turns, detail=detail))
