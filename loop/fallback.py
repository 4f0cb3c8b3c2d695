"""Sticky model fallback: what an overloaded model means for the run (pure functions).

At ``fallback_after_overloads`` overloads in a row the run switches to the fallback model for
good; the switch strips thinking blocks (bound to the model that signed them), and calls that
already ran are not run again.

Details: docs/internals/loop.md
"""

from __future__ import annotations

from dataclasses import replace

from loop.config import LoopConfig
from loop.context.thinking import has_thinking, strip_thinking
from loop.messages import normalize
from loop.outcome import ApiErrorInfo
from loop.state import LoopState
from loop.transitions import ModelFallback, OverloadRetry

OVERLOADED_ERROR = "overloaded_error"
OVERLOADED_STATUS = 529
MAX_RETRY_DELAY_S = 8.0
FALLBACK_RESULT_TEXT = "Not used: the response was dropped (model overloaded) and the request retried."


def current_model(state: LoopState, config: LoopConfig) -> str:
    return state.model or config.model


def is_overload(error: ApiErrorInfo) -> bool:
    return error.error_type == OVERLOADED_ERROR or error.status == OVERLOADED_STATUS


def after_overload(
    state: LoopState, error: ApiErrorInfo, config: LoopConfig
) -> OverloadRetry | ModelFallback | None:
    """The transition for an overload, or ``None`` (no fallback configured, or already on it:
    the error ends the run)."""
    fallback = config.fallback_model
    model = current_model(state, config)
    if fallback is None or not is_overload(error) or model == fallback:
        return None
    overloads = state.consecutive_overloads + 1
    if overloads >= config.fallback_after_overloads:
        return ModelFallback(from_model=model, to_model=fallback)
    return OverloadRetry(model=model, overloads=overloads)


def retry_delay(config: LoopConfig, overloads: int) -> float:
    """The backoff before retry number ``overloads``: doubling, at most 8 s."""
    return min(config.overload_retry_delay_s * 2.0 ** max(overloads - 1, 0), MAX_RETRY_DELAY_S)


def retried(state: LoopState, transition: OverloadRetry) -> LoopState:
    """The state for the retry: the history as it was (the response is dropped)."""
    return replace(state, consecutive_overloads=transition.overloads)


def switched(state: LoopState, to_model: str) -> LoopState:
    """The state on the fallback model: thinking stripped, the overload count reset."""
    messages = state.messages
    context = state.context
    if has_thinking(messages):
        messages = tuple(normalize(strip_thinking(messages)))
        context = replace(context, thinking_disabled=True, thinking_budget=None)
    return replace(state, model=to_model, consecutive_overloads=0, messages=messages, context=context)


def sticky(state: LoopState, model: str | None) -> LoopState:
    """A switch the caller made by itself (``StatusEvent(kind="fallback", model=...)``)."""
    if model is None or model == state.model:
        return state
    return switched(state, model)
