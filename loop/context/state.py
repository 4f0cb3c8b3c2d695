"""The context part of the loop's state: recovery flags, learned limits, pending work.

A frozen value inside ``LoopState`` (``state.context``), rebuilt whole by ``advance`` like the rest
of the state. ``decide`` reads it to pick the next recovery rung; the context pipeline reads and
rebuilds it before every model call. What must outlive one run (the auto-compact circuit breaker,
stored tool results) is in :class:`loop.context.session.ContextSession` instead.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace


class Pending(enum.StrEnum):
    """Work a recovery transition asks of the next pipeline pass."""

    DRAIN = "drain"
    """Collapse every completed span outside the protected tail and clear every old tool result."""
    REACTIVE = "reactive"
    """Shed the cheap layers, then summarise to fit the (learned) limit, whatever the threshold."""


@dataclass(frozen=True, slots=True)
class ContextState:
    pending: Pending | None = None
    reactive_attempted: frozenset[str] = frozenset()
    """Error kinds reactive compaction was tried for since the last completed tool turn (kept
    across stop-hook retries: resetting it there is how a loop burns thousands of calls)."""
    drained: frozenset[str] = frozenset()
    """Error kinds a collapse drain was tried for (same lifetime)."""
    can_drain: bool = False
    """The last pipeline pass saw completed tool work outside the tail (a drain could free it)."""
    thinking_downgraded: bool = False
    """The thinking downgrade rung was used (once per run)."""
    thinking_budget: int | None = None
    """Thinking budget after a downgrade (``None``: the config's, or none when disabled)."""
    thinking_disabled: bool = False
    max_tokens_cap: int | None = None
    """Output cap after a context overflow (applies for the rest of the run)."""
    learned_limit: int | None = None
    """The most prompt tokens the upstream accepts, stated or inferred from a refusal."""
    largest_accepted_prompt: int = 0
    """The largest prompt (API-reported) a response was given in this run: a refusal's limit is
    at least that."""
    overhead_tokens: int = 0
    """Estimated tokens of the system prompt and tool definitions."""
    compactions: int = 0
    """Summarisations that replaced the history in this run."""
    summariser_calls: int = 0

    def clear_recovery(self) -> ContextState:
        """After a completed tool turn: the once-per-kind rungs are available again."""
        if not self.reactive_attempted and not self.drained:
            return self
        return replace(self, reactive_attempted=frozenset(), drained=frozenset())
