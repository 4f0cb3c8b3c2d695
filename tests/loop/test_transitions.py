"""The closed sets of terminal and continue reasons."""

from __future__ import annotations

import typing

from loop.transitions import (
    AbortedTools,
    Guardrail,
    GuardrailKind,
    GuardrailReport,
    MaxOutputTokensEscalate,
    Terminal,
    Transition,
    describe,
)


def test_the_sets_and_their_wire_names() -> None:
    terminals = {cls.reason for cls in typing.get_args(Terminal)}
    assert terminals == {
        "completed",
        "aborted_streaming",
        "aborted_tools",
        "max_turns",
        "prompt_too_long",
        "model_error",
        "refusal",
        "guardrail",
        "blocking_limit",
        "stop_hook_prevented",
        "stop_hook_limit",
        "hook_stopped",
        "structured_output_invalid",
        "permission_denied",
    }
    transitions = {cls.reason for cls in typing.get_args(Transition)}
    assert transitions == {
        "next_turn",
        "pause_turn_resume",
        "max_output_tokens_escalate",
        "max_output_tokens_recovery",
        "collapse_drain",
        "reactive_compact_retry",
        "structured_output_retry",
        "thinking_downgrade",
        "stop_hook_blocking",
        "token_budget_continuation",
        "overload_retry",
        "model_fallback",
        "submit_interrupt",
    }


def test_values_are_frozen() -> None:
    value = MaxOutputTokensEscalate(64_000)
    try:
        value.max_tokens = 1  # type: ignore[misc]
    except AttributeError:
        return
    raise AssertionError("transitions must be immutable")


def test_describe_is_json_ready() -> None:
    report = GuardrailReport(limit=5, observed=5, turns=7, detail="same call")
    assert describe(Guardrail(GuardrailKind.REPEATED_TOOL_CALLS, report)) == {
        "reason": "guardrail",
        "kind": "repeated_tool_calls",
        "report": {"limit": 5, "observed": 5, "turns": 7, "detail": "same call"},
    }
    assert describe(AbortedTools(2, ("a", "b"))) == {
        "reason": "aborted_tools",
        "turn": 2,
        "interrupted_tool_use_ids": ["a", "b"],
    }
