"""What the layers are given: the run's settings (``ContextSettings``) and the pass's view
(``LayerState``), and the thresholds both imply."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from loop.context.config import ContextConfig, autocompact_threshold, blocking_limit
from loop.context.state import Pending


@dataclass(frozen=True, slots=True)
class Thresholds:
    window: int
    """What the prompt may use: the effective window, or the learned limit when lower."""
    autocompact: int
    blocking: int
    """Always the configured window's: a learned limit is the upstream's to enforce."""


@dataclass(frozen=True, slots=True)
class ContextSettings:
    """Fixed for one run: the configuration plus what the run's tools and prompt imply."""

    config: ContextConfig
    effective_window: int
    blocking_buffer_tokens: int
    tool_caps: Mapping[str, int | None]
    """``max_result_size_chars`` per tool name (``None``: exempt from the budget)."""
    overhead_tokens: int = 0
    """Estimated tokens of the system prompt and the tool definitions."""
    thinking: bool = False
    """The run's requests enable extended thinking."""
    server_edits: bool = False
    """Microcompact is the upstream's (context-management beta), not the client's."""

    def thresholds(self, learned_limit: int | None = None) -> Thresholds:
        window = self.effective_window
        if learned_limit is not None:
            window = min(window, learned_limit)
        return Thresholds(
            window=window,
            autocompact=autocompact_threshold(window, self.config.autocompact_buffer_tokens),
            blocking=blocking_limit(self.effective_window, self.blocking_buffer_tokens),
        )


@dataclass(frozen=True, slots=True)
class LayerState:
    """One pipeline pass as a layer sees it."""

    turn: int
    """The model call this pass prepares (numbered like ``LoopState.turn_count + 1``)."""
    tokens: int
    """Estimated context tokens of the history as it is now (after the layers before this one)."""
    pending: Pending | None = None
    learned_limit: int | None = None

    def with_tokens(self, tokens: int) -> LayerState:
        return LayerState(self.turn, tokens, self.pending, self.learned_limit)
