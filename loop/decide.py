"""What happens after a model response: a pure function of (state, outcome, config).

``stop_reason`` is the only signal (never the text): ``tool_use`` runs tools; ``end_turn`` and
``stop_sequence`` complete; ``pause_turn`` resumes; ``max_tokens`` escalates the cap once, then
asks the model to continue up to ``max_output_recoveries`` times; ``model_context_window_exceeded``
is ``prompt_too_long``; ``refusal`` is ``refusal``; an error is ``model_error`` (or
``prompt_too_long`` when the API said the prompt does not fit).
"""

from __future__ import annotations

from loop.config import LoopConfig
from loop.outcome import ApiErrorInfo, TurnOutcome
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

PROMPT_TOO_LONG_MARKER = "prompt is too long"


def decide(state: LoopState, outcome: TurnOutcome, config: LoopConfig) -> Transition | Terminal:
    if outcome.error is not None:
        return _from_error(outcome.error)
    if not outcome.complete:
        return ModelError("incomplete_stream", "the response stream ended before message_stop")
    stop_reason = outcome.stop_reason
    if stop_reason == "tool_use":
        if not outcome.tool_uses:
            return ModelError("invalid_response", "stop_reason tool_use without a tool_use block")
        return NextTurn(tool_use_count=len(outcome.tool_uses))
    if stop_reason in ("end_turn", "stop_sequence"):
        return Completed(stop_reason, outcome.stop_sequence)
    if stop_reason == "pause_turn":
        return PauseTurnResume()
    if stop_reason == "max_tokens":
        return _after_max_tokens(state, config)
    if stop_reason == "model_context_window_exceeded":
        return PromptTooLong("the model's context window was exceeded (model_context_window_exceeded)")
    if stop_reason == "refusal":
        return Refusal(outcome.stop_details)
    return ModelError("invalid_response", f"unknown stop_reason {stop_reason!r}")


def _from_error(error: ApiErrorInfo) -> Terminal:
    if error.status == 413 or error.error_type == "request_too_large":
        return PromptTooLong(f"{error.error_type}: {error.message}")
    if error.error_type == "invalid_request_error" and PROMPT_TOO_LONG_MARKER in error.message.lower():
        return PromptTooLong(f"{error.error_type}: {error.message}")
    return ModelError(error.error_type, error.message, error.status)


def _after_max_tokens(state: LoopState, config: LoopConfig) -> Transition | Terminal:
    if state.max_output_tokens_override is None and config.escalated_max_tokens > config.max_tokens:
        return MaxOutputTokensEscalate(config.escalated_max_tokens)
    if state.max_output_recovery_count < config.max_output_recoveries:
        return MaxOutputTokensRecovery(attempt=state.max_output_recovery_count + 1)
    cap = state.max_output_tokens_override or config.max_tokens
    return ModelError(
        "max_output_tokens",
        f"the response was still truncated at max_tokens={cap} after "
        f"{state.max_output_recovery_count} continuation attempt(s)",
    )
