"""Every way the loop can continue and every way it can end, in one place.

Two closed sets of frozen dataclasses (``Transition``, ``Terminal``) that callers match
exhaustively; each ``reason`` is the wire name, and nothing else in the package lists them.

Details: docs/internals/loop.md
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

# --- continue transitions -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NextTurn:
    """The model asked for tools; their results were appended."""

    reason: ClassVar[Literal["next_turn"]] = "next_turn"
    tool_use_count: int


@dataclass(frozen=True, slots=True)
class PauseTurnResume:
    """``stop_reason: pause_turn``: the paused assistant turn is sent back so the model continues."""

    reason: ClassVar[Literal["pause_turn_resume"]] = "pause_turn_resume"


@dataclass(frozen=True, slots=True)
class MaxOutputTokensEscalate:
    """The response hit the default output cap: discard it and retry once with a higher cap."""

    reason: ClassVar[Literal["max_output_tokens_escalate"]] = "max_output_tokens_escalate"
    max_tokens: int


@dataclass(frozen=True, slots=True)
class MaxOutputTokensRecovery:
    """The response hit the (escalated) cap: keep it and ask the model to continue."""

    reason: ClassVar[Literal["max_output_tokens_recovery"]] = "max_output_tokens_recovery"
    attempt: int


@dataclass(frozen=True, slots=True)
class CollapseDrain:
    """The upstream refused the prompt as too long: collapse every completed span of tool work
    and clear every old tool result, then retry (once per error kind)."""

    reason: ClassVar[Literal["collapse_drain"]] = "collapse_drain"
    error_kind: str
    learned_limit: int | None = None


@dataclass(frozen=True, slots=True)
class ReactiveCompactRetry:
    """The upstream refused the prompt as too long (or the response hit
    ``model_context_window_exceeded``): summarise the history to fit and retry (once per error
    kind). ``learned_limit`` is the prompt limit the refusal stated or implied."""

    reason: ClassVar[Literal["reactive_compact_retry"]] = "reactive_compact_retry"
    error_kind: str
    learned_limit: int | None = None


@dataclass(frozen=True, slots=True)
class ThinkingDowngrade:
    """The context overflowed with extended thinking on: retry once with a smaller output cap and
    thinking budget (``thinking_budget=None``: without thinking, its blocks stripped)."""

    reason: ClassVar[Literal["thinking_downgrade"]] = "thinking_downgrade"
    error_kind: str
    max_tokens: int | None
    thinking_budget: int | None


@dataclass(frozen=True, slots=True)
class StopHookBlocking:
    """A stop hook returned blocking errors: they were appended and the model goes on."""

    reason: ClassVar[Literal["stop_hook_blocking"]] = "stop_hook_blocking"
    errors: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TokenBudgetContinuation:
    """The model ended its turn below 90% of the run's token budget (and was not producing less
    and less): the answer was kept, a nudge saying how much budget is left was appended, and the
    model goes on. ``continuation`` counts them (1 for the first)."""

    reason: ClassVar[Literal["token_budget_continuation"]] = "token_budget_continuation"
    turn_tokens: int
    budget: int
    continuation: int


@dataclass(frozen=True, slots=True)
class StructuredOutputRetry:
    """The final answer did not validate against the run's output type
    (``QueryParams.output_type``): the validation errors were appended and the model answers
    again (at most ``QueryParams.output_retries`` times)."""

    reason: ClassVar[Literal["structured_output_retry"]] = "structured_output_retry"
    attempt: int
    errors: str


@dataclass(frozen=True, slots=True)
class OverloadRetry:
    """The model was overloaded (a 529 after the caller's retries, or an ``overloaded_error``
    mid-stream): the response is dropped (tombstoned) and the request sent again to the same model
    after a backoff. ``overloads``: overloads in a row so far."""

    reason: ClassVar[Literal["overload_retry"]] = "overload_retry"
    model: str
    overloads: int


@dataclass(frozen=True, slots=True)
class ModelFallback:
    """Repeated overloads on the primary: the run switched to the fallback model for good (the
    partial response tombstoned, thinking blocks stripped: their signatures are model-bound)."""

    reason: ClassVar[Literal["model_fallback"]] = "model_fallback"
    from_model: str
    to_model: str


@dataclass(frozen=True, slots=True)
class SubmitInterrupt:
    """A new user message arrived mid-turn (``Run.submit``): the turn stopped (what streamed and
    the tools that finished kept, the others answered as interrupted) and the message appended,
    without an interruption message."""

    reason: ClassVar[Literal["submit_interrupt"]] = "submit_interrupt"
    turn: int


Transition = (
    NextTurn
    | PauseTurnResume
    | MaxOutputTokensEscalate
    | MaxOutputTokensRecovery
    | CollapseDrain
    | ReactiveCompactRetry
    | ThinkingDowngrade
    | StopHookBlocking
    | TokenBudgetContinuation
    | StructuredOutputRetry
    | OverloadRetry
    | ModelFallback
    | SubmitInterrupt
)


# --- terminal reasons -------------------------------------------------------------------------


class GuardrailKind(enum.StrEnum):
    TOKENS = "tokens"
    CACHE_READ_TOKENS = "cache_read_tokens"
    COST = "cost"
    WALL_CLOCK = "wall_clock"
    CONSECUTIVE_ERRORS = "consecutive_errors"
    REPEATED_TOOL_CALLS = "repeated_tool_calls"


@dataclass(frozen=True, slots=True)
class GuardrailReport:
    """What tripped: the configured limit, the observed value, and a sentence for humans."""

    limit: float
    observed: float
    turns: int
    detail: str


@dataclass(frozen=True, slots=True)
class Completed:
    """The model ended its turn (``end_turn`` or ``stop_sequence``)."""

    reason: ClassVar[Literal["completed"]] = "completed"
    stop_reason: str
    stop_sequence: str | None = None


@dataclass(frozen=True, slots=True)
class AbortedStreaming:
    """The run was closed or cancelled while a model response was streaming (or before one)."""

    reason: ClassVar[Literal["aborted_streaming"]] = "aborted_streaming"
    turn: int


@dataclass(frozen=True, slots=True)
class AbortedTools:
    """The run was closed or cancelled while tools were running."""

    reason: ClassVar[Literal["aborted_tools"]] = "aborted_tools"
    turn: int
    interrupted_tool_use_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class MaxTurns:
    """The safety net: ``max_turns`` model calls were made."""

    reason: ClassVar[Literal["max_turns"]] = "max_turns"
    max_turns: int


@dataclass(frozen=True, slots=True)
class PromptTooLong:
    """The conversation no longer fits (``prompt is too long``, a 413, ``Input is too long.``,
    ``model_context_window_exceeded``...) and every recovery rung for it was used."""

    reason: ClassVar[Literal["prompt_too_long"]] = "prompt_too_long"
    detail: str
    error_kind: str = ""


@dataclass(frozen=True, slots=True)
class ModelError:
    """The model call failed (HTTP error, ``error`` event, broken stream) after the retry layer.

    ``error_type`` is the Anthropic error type (``overloaded_error``...) or one of the loop's own:
    ``incomplete_stream``, ``invalid_response``, ``max_output_tokens`` (still truncated after the
    escalation and every continuation), ``client_error`` (the model caller raised).
    """

    reason: ClassVar[Literal["model_error"]] = "model_error"
    error_type: str
    message: str
    status: int | None = None


@dataclass(frozen=True, slots=True)
class Refusal:
    """``stop_reason: refusal``."""

    reason: ClassVar[Literal["refusal"]] = "refusal"
    stop_details: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Guardrail:
    """A per-run limit other than ``max_turns`` was reached."""

    reason: ClassVar[Literal["guardrail"]] = "guardrail"
    kind: GuardrailKind
    report: GuardrailReport


@dataclass(frozen=True, slots=True)
class BlockingLimit:
    """The estimated context reached the hard limit (``effective_window - 3_000``)."""

    reason: ClassVar[Literal["blocking_limit"]] = "blocking_limit"
    estimated_tokens: int
    limit: int


@dataclass(frozen=True, slots=True)
class StopHookPrevented:
    """A stop hook prevented continuation."""

    reason: ClassVar[Literal["stop_hook_prevented"]] = "stop_hook_prevented"
    message: str


@dataclass(frozen=True, slots=True)
class StopHookLimit:
    """Stop hooks blocked the model's completion again after ``limit`` blocking continuations in a
    row (``LoopConfig.max_stop_hook_blocks``): the model could not satisfy them, so the run ends
    instead of looping. The answer is kept; ``errors`` are the last block's."""

    reason: ClassVar[Literal["stop_hook_limit"]] = "stop_hook_limit"
    limit: int
    errors: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class HookStopped:
    """A lifecycle hook stopped the run: ``continue: false`` from a ``PreToolUse`` /
    ``PostToolUse`` / ``SessionStart`` / ``UserPromptSubmit`` hook, or a ``UserPromptSubmit`` hook
    that blocked the prompt (exit code 2, ``decision: "block"``). ``event`` names the hook event,
    ``message`` is its ``stopReason`` / reason / stderr."""

    reason: ClassVar[Literal["hook_stopped"]] = "hook_stopped"
    event: str
    message: str


@dataclass(frozen=True, slots=True)
class StructuredOutputInvalid:
    """The final answer still did not validate against the output type after every retry."""

    reason: ClassVar[Literal["structured_output_invalid"]] = "structured_output_invalid"
    attempts: int
    errors: str


@dataclass(frozen=True, slots=True)
class PermissionDenied:
    """A tool call was refused by a verdict that asked to stop the run
    (``PermissionVerdict.interrupt``: a headless run that cannot ask anyone); the refusal is the
    call's result in the final history."""

    reason: ClassVar[Literal["permission_denied"]] = "permission_denied"
    tool_name: str
    tool_use_id: str
    message: str


Terminal = (
    Completed
    | AbortedStreaming
    | AbortedTools
    | MaxTurns
    | PromptTooLong
    | ModelError
    | Refusal
    | Guardrail
    | BlockingLimit
    | StopHookPrevented
    | StopHookLimit
    | HookStopped
    | StructuredOutputInvalid
    | PermissionDenied
)


def describe(value: Transition | Terminal) -> dict[str, Any]:
    """A JSON-ready view: ``{"reason": ..., <fields>}``."""
    out: dict[str, Any] = {"reason": value.reason}
    for name in value.__dataclass_fields__:
        field_value = getattr(value, name)
        if isinstance(field_value, GuardrailReport):
            field_value = {
                "limit": field_value.limit,
                "observed": field_value.observed,
                "turns": field_value.turns,
                "detail": field_value.detail,
            }
        elif isinstance(field_value, tuple):
            field_value = list(field_value)
        out[name] = field_value
    return out
