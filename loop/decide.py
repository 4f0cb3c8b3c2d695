"""What happens after a model response: a pure function of (state, outcome, config).

``stop_reason`` is the only signal (never the text). Each rung of the context recovery ladder is
used at most once and recorded in the new state; keep every decision here, not in ``query``.

Details: docs/internals/loop.md
"""

from __future__ import annotations

from collections.abc import Sequence

from loop.budget import check_budget
from loop.config import LoopConfig
from loop.context.errors import ContextError, ContextErrorKind, classify
from loop.fallback import after_overload
from loop.outcome import ApiErrorInfo, TurnOutcome
from loop.state import LoopState
from loop.stop_hooks import StopHookResult
from loop.tokens import context_tokens, discounted_image_bytes
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
    StopHookBlocking,
    StopHookLimit,
    StopHookPrevented,
    Terminal,
    ThinkingDowngrade,
    TokenBudgetContinuation,
    Transition,
)

MIN_THINKING_BUDGET = 1_024
OUTPUT_MARGIN = 1_000
"""Kept free under the window when the output cap is lowered to fit."""
MIN_DOWNGRADED_MAX_TOKENS = 1_024


def decide(state: LoopState, outcome: TurnOutcome, config: LoopConfig) -> Transition | Terminal:
    if outcome.error is not None:
        return _from_error(state, outcome.error, config)
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
        error = ContextError(
            ContextErrorKind.WINDOW_EXCEEDED,
            "the model's context window was exceeded (model_context_window_exceeded)",
        )
        return recover(state, error, config)
    if stop_reason == "refusal":
        return Refusal(outcome.stop_details)
    return ModelError("invalid_response", f"unknown stop_reason {stop_reason!r}")


def after_stop_hooks(results: Sequence[StopHookResult]) -> StopHookBlocking | StopHookPrevented | None:
    """What the stop hooks' answers to a completed turn mean (``None``: the run completes)."""
    for result in results:
        if result.prevent_continuation:
            return StopHookPrevented(result.message or "a stop hook prevented continuation")
    errors = tuple(error for result in results for error in result.blocking_errors)
    return StopHookBlocking(errors) if errors else None


def after_completion(
    state: LoopState, completed: Completed, hook_results: Sequence[StopHookResult], config: LoopConfig
) -> Completed | StopHookBlocking | StopHookPrevented | StopHookLimit | TokenBudgetContinuation:
    """What a completed turn leads to, given the stop hooks' answers to it: a hook that prevents
    continuation ends the run; blocking errors continue it (``max_stop_hook_blocks`` times in a
    row at most, then ``stop_hook_limit``); otherwise the token budget may continue it."""
    hooked = after_stop_hooks(hook_results)
    if isinstance(hooked, StopHookPrevented):
        return hooked
    if isinstance(hooked, StopHookBlocking):
        if state.stop_hook_blocks >= config.max_stop_hook_blocks:
            return StopHookLimit(config.max_stop_hook_blocks, hooked.errors)
        return hooked
    continuation = check_budget(state.budget, config.token_budget, subagent=config.subagent)
    return continuation if continuation is not None else completed


def recover(state: LoopState, error: ContextError, config: LoopConfig) -> Transition | Terminal:
    """The next unused rung of the ladder for ``error``, or ``prompt_too_long``."""
    kind = error.kind.value
    context = state.context
    if not config.context.enabled:
        return PromptTooLong(error.detail, kind)
    if error.kind is ContextErrorKind.OUTPUT_OVERFLOW and not context.thinking_downgraded:
        downgrade = _fitting_output(state, error, config)
        if downgrade is not None:
            return downgrade
    window_exceeded = error.kind is ContextErrorKind.WINDOW_EXCEEDED
    if not window_exceeded and context.can_drain and kind not in context.drained:
        return CollapseDrain(kind, _learned_limit(state, error, config))
    if kind not in context.reactive_attempted:
        return ReactiveCompactRetry(kind, None if window_exceeded else _learned_limit(state, error, config))
    if (
        not window_exceeded
        and _thinking_budget(state, config) is not None
        and not context.thinking_downgraded
    ):
        return ThinkingDowngrade(kind, max_tokens=None, thinking_budget=None)
    return PromptTooLong(error.detail, kind)


def _from_error(state: LoopState, error: ApiErrorInfo, config: LoopConfig) -> Transition | Terminal:
    context_error = classify(error)
    if context_error is None:
        overloaded = after_overload(state, error, config)
        if overloaded is not None:
            return overloaded
        return ModelError(error.error_type, error.message, error.status)
    return recover(state, context_error, config)


def _learned_limit(state: LoopState, error: ContextError, config: LoopConfig) -> int | None:
    """The prompt limit a refusal states (``N maximum``) or implies: a share of what was refused,
    but never less than the largest prompt the upstream accepted in this run."""
    if error.kind is ContextErrorKind.OUTPUT_OVERFLOW:
        return state.context.learned_limit  # the prompt itself fitted
    if error.kind is ContextErrorKind.REQUEST_TOO_LARGE and discounted_image_bytes(state.messages):
        return state.context.learned_limit  # too many bytes of images, not too many tokens
    if error.limit is not None:
        learned = error.limit
    else:
        refused = error.prompt_tokens or context_tokens(state)
        learned = int(refused * config.context.unknown_limit_factor)
        accepted = state.context.largest_accepted_prompt
        if accepted < refused:
            learned = max(learned, accepted)
    learned = max(learned, config.context.min_learned_limit)
    current = state.context.learned_limit
    return learned if current is None else min(current, learned)


def _thinking_budget(state: LoopState, config: LoopConfig) -> int | None:
    if state.context.thinking_disabled:
        return None
    return state.context.thinking_budget or config.thinking_budget_tokens


def current_max_tokens(state: LoopState, config: LoopConfig) -> int:
    cap = state.max_output_tokens_override or config.max_tokens
    if state.context.max_tokens_cap is not None:
        cap = min(cap, state.context.max_tokens_cap)
    return cap


def _fitting_output(state: LoopState, error: ContextError, config: LoopConfig) -> ThinkingDowngrade | None:
    """A smaller output cap (and thinking budget) that fits next to the prompt, if one does."""
    current = current_max_tokens(state, config)
    if error.limit is not None and error.prompt_tokens is not None:
        max_tokens = error.limit - error.prompt_tokens - OUTPUT_MARGIN
    else:
        max_tokens = current // 2
    max_tokens = min(max_tokens, current - 1)
    if max_tokens < MIN_DOWNGRADED_MAX_TOKENS:
        return None
    budget = _thinking_budget(state, config)
    if budget is not None:
        budget = min(budget, max_tokens - MIN_THINKING_BUDGET)
        if budget < MIN_THINKING_BUDGET:
            budget = None
    return ThinkingDowngrade(error.kind.value, max_tokens=max_tokens, thinking_budget=budget)


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
