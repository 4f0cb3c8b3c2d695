"""The loop's state: one frozen value, rebuilt whole on every iteration (never poked)."""

from __future__ import annotations

from dataclasses import dataclass, field

from loop.budget import BudgetState
from loop.context.state import ContextState
from loop.messages import Message
from loop.transitions import Transition
from loop.usage import TokenUsage


@dataclass(frozen=True, slots=True)
class LoopState:
    messages: tuple[Message, ...]
    started_at: float
    """Clock reading when the run started (the wall-clock guardrail's origin)."""
    turn_count: int = 0
    """Model responses received (every request counts: retries and continuations too)."""
    usage: TokenUsage = field(default_factory=TokenUsage)
    """Totals over every response, discarded ones included (they were billed)."""
    context_tokens: int = 0
    """Prompt + output tokens of the last response, as the API reported them (or, at the start and
    after a layer rewrote the history, the estimate then, system prompt and tools included)."""
    context_message_count: int = 0
    """How many of ``messages`` ``context_tokens`` covers (newer ones are estimated)."""
    context: ContextState = field(default_factory=ContextState)
    """Recovery flags, learned limits and pending work of the context layers."""
    max_output_tokens_override: int | None = None
    """The escalated output cap, while it applies."""
    max_output_recovery_count: int = 0
    consecutive_error_turns: int = 0
    last_tool_signature: str | None = None
    repeated_tool_calls: int = 0
    """How many times in a row ``last_tool_signature`` was called."""
    stop_hook_active: bool = False
    """Set by stop-hook continuations (the loop went round again because a stop hook blocked)."""
    stop_hook_blocks: int = 0
    """Completions in a row the stop hooks blocked (reset when they let one through)."""
    budget: BudgetState = field(default_factory=BudgetState)
    """The token budget's bookkeeping (output tokens, continuations, the last deltas)."""
    model: str = ""
    """The model requests go to now (``""``: ``config.model``); the fallback model once a sticky
    fallback happened (:mod:`loop.fallback`)."""
    consecutive_overloads: int = 0
    """Overloaded responses in a row on the current model."""
    transition: Transition | None = None
    """Why the loop last continued (``None`` before the first continuation)."""
    transitions: tuple[Transition, ...] = ()
    """Every continuation so far, in order."""


def initial_state(messages: tuple[Message, ...], started_at: float) -> LoopState:
    return LoopState(messages=messages, started_at=started_at)
