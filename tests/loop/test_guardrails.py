"""Guardrails: each limit ends the run with its own terminal and report; checked in a fixed order."""

from __future__ import annotations

import pytest

from loop.config import LoopConfig
from loop.guardrails import check_guardrails
from loop.messages import user_message
from loop.state import LoopState
from loop.transitions import BlockingLimit, Guardrail, GuardrailKind, MaxTurns
from loop.usage import TokenUsage

PROMPT = (user_message("go"),)


def state(**fields: object) -> LoopState:
    return LoopState(messages=PROMPT, started_at=100.0, **fields)  # type: ignore[arg-type]


def test_nothing_reached() -> None:
    assert check_guardrails(state(turn_count=3), LoopConfig(), now=150.0) is None


def test_max_turns() -> None:
    assert check_guardrails(state(turn_count=20), LoopConfig(), now=100.0) == MaxTurns(20)
    assert check_guardrails(state(turn_count=19), LoopConfig(), now=100.0) is None


@pytest.mark.parametrize(
    ("fields", "now", "kind", "limit", "observed"),
    [
        (
            {"usage": TokenUsage(input_tokens=60_000, output_tokens=40_000)},
            100.0,
            GuardrailKind.TOKENS,
            100_000,
            100_000,
        ),
        ({}, 400.0, GuardrailKind.WALL_CLOCK, 300.0, 300.0),
        ({"consecutive_error_turns": 3}, 100.0, GuardrailKind.CONSECUTIVE_ERRORS, 3, 3),
        (
            {"repeated_tool_calls": 5, "last_tool_signature": '["read",{"path":"a"}]'},
            100.0,
            GuardrailKind.REPEATED_TOOL_CALLS,
            5,
            5,
        ),
    ],
)
def test_each_guardrail_reports_its_kind(
    fields: dict[str, object], now: float, kind: GuardrailKind, limit: float, observed: float
) -> None:
    result = check_guardrails(state(turn_count=4, **fields), LoopConfig(), now=now)
    assert isinstance(result, Guardrail)
    assert result.kind is kind
    assert (result.report.limit, result.report.observed, result.report.turns) == (limit, observed, 4)
    assert result.report.detail


def test_just_below_each_limit_passes() -> None:
    below = state(
        usage=TokenUsage(input_tokens=99_999),
        consecutive_error_turns=2,
        repeated_tool_calls=4,
        turn_count=19,
    )
    assert check_guardrails(below, LoopConfig(), now=399.9) is None


def test_disabled_limits() -> None:
    config = LoopConfig(
        max_total_tokens=None,
        max_wall_clock_s=None,
        max_consecutive_errors=None,
        max_repeated_tool_calls=None,
    )
    over = state(usage=TokenUsage(input_tokens=10**6), consecutive_error_turns=9, repeated_tool_calls=9)
    assert check_guardrails(over, config, now=10**6) is None


def test_order_max_turns_first_then_tokens() -> None:
    over = state(turn_count=20, usage=TokenUsage(input_tokens=10**6), consecutive_error_turns=9)
    assert check_guardrails(over, LoopConfig(), now=10**6) == MaxTurns(20)
    result = check_guardrails(
        state(usage=TokenUsage(input_tokens=10**6), consecutive_error_turns=9), LoopConfig(), now=10**6
    )
    assert isinstance(result, Guardrail) and result.kind is GuardrailKind.TOKENS


def test_blocking_limit_uses_reported_tokens_plus_an_estimate_of_newer_messages() -> None:
    config = LoopConfig(context_window=50_000, max_total_tokens=None)
    # effective window = 50_000 - min(64_000, 20_000) = 30_000; blocking at 27_000
    assert config.blocking_limit == 27_000
    near = state(context_tokens=26_990, context_message_count=0)
    result = check_guardrails(near, config, now=100.0)
    assert isinstance(result, BlockingLimit) and result.limit == 27_000 and result.estimated_tokens > 27_000
    assert check_guardrails(state(context_tokens=20_000, context_message_count=1), config, now=100.0) is None


def test_the_compaction_agent_is_exempt_from_the_blocking_limit() -> None:
    config = LoopConfig(context_window=50_000, source="compact", max_total_tokens=None)
    assert check_guardrails(state(context_tokens=40_000, context_message_count=1), config, now=100.0) is None
