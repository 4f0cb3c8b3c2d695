"""``decide``: every (state, outcome) pair, table-driven. Pure: no loop, no I/O."""

from __future__ import annotations

from dataclasses import replace

import pytest

from loop.config import LoopConfig
from loop.context.config import ContextConfig
from loop.context.state import ContextState
from loop.decide import decide
from loop.outcome import ApiErrorInfo, ToolUse, TurnOutcome
from loop.state import LoopState
from loop.transitions import (
    CollapseDrain,
    Completed,
    MaxOutputTokensEscalate,
    MaxOutputTokensRecovery,
    ModelError,
    NextTurn,
    PauseTurnResume,
    PromptTooLong,
    ReactiveCompactRetry,
    Refusal,
    Terminal,
    ThinkingDowngrade,
    Transition,
)

CONFIG = LoopConfig()
FRESH = LoopState(messages=(), started_at=0.0)
ESCALATED = LoopState(messages=(), started_at=0.0, max_output_tokens_override=64_000)
ONE_RECOVERY = LoopState(
    messages=(), started_at=0.0, max_output_tokens_override=64_000, max_output_recovery_count=1
)
RECOVERIES_SPENT = LoopState(
    messages=(), started_at=0.0, max_output_tokens_override=64_000, max_output_recovery_count=3
)
CALL = ToolUse("toolu_1", "read_file", {"path": "a"})


def done(stop_reason: str | None, *, tool_uses: tuple[ToolUse, ...] = (), **fields: object) -> TurnOutcome:
    return TurnOutcome(stop_reason=stop_reason, tool_uses=tool_uses, complete=True, **fields)  # type: ignore[arg-type]


def failed(error_type: str, message: str, status: int | None) -> TurnOutcome:
    return TurnOutcome(error=ApiErrorInfo(error_type, message, status))


REFUSAL_DETAILS = {"type": "refusal", "category": None}
PTL_DETAIL = "invalid_request_error: prompt is too long: 210000 tokens > 200000 maximum"
PTL = failed("invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum", 400)
OVERFLOW_TEXT = (
    "input length and `max_tokens` exceed context limit: 190000 + 8000 > 197000, decrease input "
    "length or `max_tokens` and try again"
)
OVERFLOW = failed("invalid_request_error", OVERFLOW_TEXT, 400)
THINKING = LoopConfig(max_tokens=16_000, thinking_budget_tokens=10_000)
SIZED = LoopState(messages=(), started_at=0.0, context_tokens=50_000)
"""A refused request estimated at 50,000 tokens: 60% of it is the inferred limit."""
DRAINABLE = LoopState(messages=(), started_at=0.0, context=ContextState(can_drain=True))
COMPACTED = LoopState(
    messages=(),
    started_at=0.0,
    context=ContextState(reactive_attempted=frozenset({"prompt_too_long"}), learned_limit=200_000),
)
WINDOW_COMPACTED = LoopState(
    messages=(),
    started_at=0.0,
    context=ContextState(reactive_attempted=frozenset({"model_context_window_exceeded"})),
)

CASES: list[tuple[str, LoopState, TurnOutcome, LoopConfig, Transition | Terminal]] = [
    ("tool_use runs tools", FRESH, done("tool_use", tool_uses=(CALL,)), CONFIG, NextTurn(1)),
    (
        "tool_use with two calls",
        FRESH,
        done("tool_use", tool_uses=(CALL, ToolUse("toolu_2", "x", {}))),
        CONFIG,
        NextTurn(2),
    ),
    (
        "tool_use without a call is malformed",
        FRESH,
        done("tool_use"),
        CONFIG,
        ModelError("invalid_response", "stop_reason tool_use without a tool_use block"),
    ),
    ("end_turn completes", FRESH, done("end_turn"), CONFIG, Completed("end_turn")),
    (
        "end_turn completes whatever the text says",
        FRESH,
        done("end_turn", content=({"type": "text", "text": "I will now call a tool"},)),
        CONFIG,
        Completed("end_turn"),
    ),
    (
        "stop_sequence completes",
        FRESH,
        done("stop_sequence", stop_sequence="STOP"),
        CONFIG,
        Completed("stop_sequence", "STOP"),
    ),
    ("pause_turn resumes", FRESH, done("pause_turn"), CONFIG, PauseTurnResume()),
    ("pause_turn resumes after escalation too", ESCALATED, done("pause_turn"), CONFIG, PauseTurnResume()),
    ("max_tokens first escalates", FRESH, done("max_tokens"), CONFIG, MaxOutputTokensEscalate(64_000)),
    (
        "max_tokens with a truncated tool_use escalates, never runs it",
        FRESH,
        done("max_tokens", tool_uses=(CALL,)),
        CONFIG,
        MaxOutputTokensEscalate(64_000),
    ),
    (
        "max_tokens after escalation recovers",
        ESCALATED,
        done("max_tokens"),
        CONFIG,
        MaxOutputTokensRecovery(1),
    ),
    ("second recovery", ONE_RECOVERY, done("max_tokens"), CONFIG, MaxOutputTokensRecovery(2)),
    (
        "recoveries exhausted",
        RECOVERIES_SPENT,
        done("max_tokens"),
        CONFIG,
        ModelError(
            "max_output_tokens",
            "the response was still truncated at max_tokens=64000 after 3 continuation attempt(s)",
        ),
    ),
    (
        "no escalation when the cap is already the escalated one",
        FRESH,
        done("max_tokens"),
        LoopConfig(max_tokens=64_000),
        MaxOutputTokensRecovery(1),
    ),
    (
        "no recovery configured",
        ESCALATED,
        done("max_tokens"),
        LoopConfig(max_output_recoveries=0),
        ModelError(
            "max_output_tokens",
            "the response was still truncated at max_tokens=64000 after 0 continuation attempt(s)",
        ),
    ),
    (
        "context window exceeded is a truncation: compact and go on",
        FRESH,
        done("model_context_window_exceeded"),
        CONFIG,
        ReactiveCompactRetry("model_context_window_exceeded"),
    ),
    (
        "context window exceeded again after compacting for it",
        WINDOW_COMPACTED,
        done("model_context_window_exceeded"),
        CONFIG,
        PromptTooLong(
            "the model's context window was exceeded (model_context_window_exceeded)",
            "model_context_window_exceeded",
        ),
    ),
    ("refusal", FRESH, done("refusal", stop_details=REFUSAL_DETAILS), CONFIG, Refusal(REFUSAL_DETAILS)),
    (
        "unknown stop reason",
        FRESH,
        done("something_new"),
        CONFIG,
        ModelError("invalid_response", "unknown stop_reason 'something_new'"),
    ),
    (
        "stream ended without message_stop",
        FRESH,
        TurnOutcome(stop_reason="end_turn", complete=False),
        CONFIG,
        ModelError("incomplete_stream", "the response stream ended before message_stop"),
    ),
    (
        "HTTP error",
        FRESH,
        failed("overloaded_error", "Overloaded", 529),
        CONFIG,
        ModelError("overloaded_error", "Overloaded", 529),
    ),
    (
        "error event mid-stream (no status)",
        FRESH,
        failed("api_error", "Internal", None),
        CONFIG,
        ModelError("api_error", "Internal", None),
    ),
    (
        "error wins over a stop reason already seen",
        FRESH,
        TurnOutcome(
            stop_reason="end_turn", error=ApiErrorInfo("overloaded_error", "Overloaded"), complete=False
        ),
        CONFIG,
        ModelError("overloaded_error", "Overloaded", None),
    ),
    (
        "prompt is too long (400): reactive compaction, learning the stated maximum",
        FRESH,
        PTL,
        CONFIG,
        ReactiveCompactRetry("prompt_too_long", 200_000),
    ),
    (
        "request too large (413): reactive compaction, limit inferred from the refused size",
        SIZED,
        failed("request_too_large", "Request exceeds the maximum allowed number of bytes.", 413),
        CONFIG,
        ReactiveCompactRetry("request_too_large", 30_000),
    ),
    (
        "Bedrock's Input is too long.",
        SIZED,
        failed("invalid_request_error", "Input is too long.", 400),
        CONFIG,
        ReactiveCompactRetry("input_too_long", 30_000),
    ),
    (
        "Vertex's request-size 400 in its own words",
        SIZED,
        failed("invalid_request_error", "The request size (31457281 bytes) exceeds 30.000MB limit.", 400),
        CONFIG,
        ReactiveCompactRetry("input_too_long", 30_000),
    ),
    (
        "an inferred limit never goes below min_learned_limit",
        FRESH,
        failed("invalid_request_error", "Input is too long.", 400),
        CONFIG,
        ReactiveCompactRetry("input_too_long", 8_000),
    ),
    (
        "an inferred limit is at least the largest prompt the upstream accepted",
        replace(SIZED, context=ContextState(largest_accepted_prompt=45_000)),
        failed("invalid_request_error", "Input is too long.", 400),
        CONFIG,
        ReactiveCompactRetry("input_too_long", 45_000),
    ),
    (
        "a learned limit only goes down",
        replace(SIZED, context=ContextState(learned_limit=20_000)),
        failed("invalid_request_error", "Input is too long.", 400),
        CONFIG,
        ReactiveCompactRetry("input_too_long", 20_000),
    ),
    (
        "a drain comes first when there is tool work to collapse",
        DRAINABLE,
        PTL,
        CONFIG,
        CollapseDrain("prompt_too_long", 200_000),
    ),
    (
        "then reactive compaction",
        replace(DRAINABLE, context=ContextState(can_drain=True, drained=frozenset({"prompt_too_long"}))),
        PTL,
        CONFIG,
        ReactiveCompactRetry("prompt_too_long", 200_000),
    ),
    (
        "reactive compaction once per kind: then prompt_too_long",
        COMPACTED,
        PTL,
        CONFIG,
        PromptTooLong(PTL_DETAIL, "prompt_too_long"),
    ),
    (
        "another kind still gets its own reactive compaction",
        replace(COMPACTED, context=replace(COMPACTED.context, learned_limit=None)),
        failed("request_too_large", "Request exceeds the maximum allowed number of bytes.", 413),
        CONFIG,
        ReactiveCompactRetry("request_too_large", 8_000),
    ),
    (
        "with thinking on, a thinking downgrade after reactive compaction",
        COMPACTED,
        PTL,
        THINKING,
        ThinkingDowngrade("prompt_too_long", None, None),
    ),
    (
        "downgraded already: prompt_too_long",
        replace(COMPACTED, context=replace(COMPACTED.context, thinking_downgraded=True)),
        PTL,
        THINKING,
        PromptTooLong(PTL_DETAIL, "prompt_too_long"),
    ),
    (
        "input + max_tokens overflow: a smaller output cap and thinking budget first",
        FRESH,
        OVERFLOW,
        THINKING,
        ThinkingDowngrade("context_overflow", 197_000 - 190_000 - 1_000, 4_976),
    ),
    (
        "overflow with a cap too small for thinking: thinking off",
        FRESH,
        failed("invalid_request_error", OVERFLOW_TEXT.replace("190000", "194500"), 400),
        THINKING,
        ThinkingDowngrade("context_overflow", 1_500, None),
    ),
    (
        "overflow without thinking: only the output cap",
        FRESH,
        OVERFLOW,
        CONFIG,
        ThinkingDowngrade("context_overflow", 6_000, None),
    ),
    (
        "overflow after the downgrade: reactive compaction",
        replace(FRESH, context=ContextState(thinking_downgraded=True)),
        OVERFLOW,
        CONFIG,
        ReactiveCompactRetry("context_overflow", None),
    ),
    (
        "overflow with no room for any output: reactive compaction",
        FRESH,
        failed("invalid_request_error", OVERFLOW_TEXT.replace("190000", "196500"), 400),
        CONFIG,
        ReactiveCompactRetry("context_overflow", None),
    ),
    (
        "context management off: prompt_too_long at once",
        FRESH,
        PTL,
        LoopConfig(context=ContextConfig(enabled=False)),
        PromptTooLong(PTL_DETAIL, "prompt_too_long"),
    ),
    (
        "other 400 is a model error",
        FRESH,
        failed("invalid_request_error", "messages: Field required", 400),
        CONFIG,
        ModelError("invalid_request_error", "messages: Field required", 400),
    ),
]


@pytest.mark.parametrize(
    ("state", "outcome", "config", "expected"),
    [pytest.param(s, o, c, e, id=name) for name, s, o, c, e in CASES],
)
def test_decide(
    state: LoopState, outcome: TurnOutcome, config: LoopConfig, expected: Transition | Terminal
) -> None:
    assert decide(state, outcome, config) == expected


def test_every_stop_reason_of_the_api_is_covered() -> None:
    api_stop_reasons = {
        "end_turn",
        "max_tokens",
        "stop_sequence",
        "tool_use",
        "pause_turn",
        "refusal",
        "model_context_window_exceeded",
    }
    covered = {
        outcome.stop_reason for _, _, outcome, _, _ in CASES if outcome.error is None and outcome.complete
    }
    assert api_stop_reasons <= covered


def test_decide_is_pure() -> None:
    outcome = done("max_tokens")
    first = decide(FRESH, outcome, CONFIG)
    assert decide(FRESH, outcome, CONFIG) == first
    assert LoopState(messages=(), started_at=0.0) == FRESH
