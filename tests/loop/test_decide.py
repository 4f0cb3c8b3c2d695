"""``decide``: every (state, outcome) pair, table-driven. Pure: no loop, no I/O."""

from __future__ import annotations

import pytest

from loop.config import LoopConfig
from loop.decide import decide
from loop.outcome import ApiErrorInfo, ToolUse, TurnOutcome
from loop.state import LoopState
from loop.transitions import (
    Completed,
    MaxOutputTokensEscalate,
    MaxOutputTokensRecovery,
    ModelError,
    NextTurn,
    PauseTurnResume,
    PromptTooLong,
    Refusal,
    Terminal,
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
        "context window exceeded",
        FRESH,
        done("model_context_window_exceeded"),
        CONFIG,
        PromptTooLong("the model's context window was exceeded (model_context_window_exceeded)"),
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
        "prompt is too long (400)",
        FRESH,
        failed("invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum", 400),
        CONFIG,
        PromptTooLong("invalid_request_error: prompt is too long: 210000 tokens > 200000 maximum"),
    ),
    (
        "request too large (413)",
        FRESH,
        failed("request_too_large", "Request exceeds the maximum allowed number of bytes.", 413),
        CONFIG,
        PromptTooLong("request_too_large: Request exceeds the maximum allowed number of bytes."),
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
