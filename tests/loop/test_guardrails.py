"""Guardrails: each limit ends the run with its own terminal and report; checked in a fixed order."""

from __future__ import annotations

import pytest

from loop.config import LoopConfig
from loop.guardrails import check_blocking, check_guardrails
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
            {"usage": TokenUsage(input_tokens=600_000, output_tokens=400_000)},
            100.0,
            GuardrailKind.TOKENS,
            1_000_000,
            1_000_000,
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
        usage=TokenUsage(input_tokens=999_999),
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


def test_the_token_guardrail_counts_billed_tokens_not_cache_reads() -> None:
    cached = TokenUsage(input_tokens=10_000, output_tokens=5_000, cache_read_input_tokens=5_000_000)
    assert cached.billed == 15_000
    assert check_guardrails(state(usage=cached), LoopConfig(), now=100.0) is None
    writes = TokenUsage(input_tokens=1_000, output_tokens=1_000, cache_creation_input_tokens=98_000)
    result = check_guardrails(state(usage=writes), LoopConfig(max_total_tokens=100_000), now=100.0)
    assert isinstance(result, Guardrail) and result.kind is GuardrailKind.TOKENS
    assert result.report.observed == 100_000


def test_cache_reads_have_their_own_optional_cap() -> None:
    cached = TokenUsage(input_tokens=10, cache_read_input_tokens=2_000_000)
    result = check_guardrails(state(usage=cached), LoopConfig(max_cache_read_tokens=2_000_000), now=100.0)
    assert isinstance(result, Guardrail) and result.kind is GuardrailKind.CACHE_READ_TOKENS
    assert (result.report.limit, result.report.observed) == (2_000_000, 2_000_000)


def test_thresholds_of_the_design() -> None:
    config = LoopConfig()
    # effective window = 200_000 - min(64_000, 20_000) = 180_000
    assert (config.effective_window, config.autocompact_threshold, config.blocking_limit) == (
        180_000,
        167_000,
        177_000,
    )
    small = LoopConfig(context_window=30_000, escalated_max_tokens=8_000, max_tokens=4_000)
    # effective 22_000: 22_000 - 13_000 = 9_000 would leave little room, so half of it
    assert (small.effective_window, small.autocompact_threshold, small.blocking_limit) == (
        22_000,
        11_000,
        19_800,
    )


def test_the_blocking_limit_is_checked_on_the_estimate_after_the_layers() -> None:
    config = LoopConfig(context_window=50_000, max_total_tokens=None)
    # effective window = 50_000 - min(64_000, 20_000) = 30_000; blocking at 27_000
    assert config.blocking_limit == 27_000
    assert check_guardrails(state(context_tokens=40_000), config, now=100.0) is None  # not a guardrail
    result = check_blocking(27_000, config.blocking_limit, config)
    assert result == BlockingLimit(27_000, 27_000)
    assert check_blocking(26_999, config.blocking_limit, config) is None


def test_the_compaction_agent_is_exempt_from_the_blocking_limit() -> None:
    config = LoopConfig(context_window=50_000, source="compact", max_total_tokens=None)
    assert check_blocking(40_000, config.blocking_limit, config) is None
