"""The pure layers (0 to 3) in the order they run; layer 4 (auto-compact) follows them."""

from __future__ import annotations

from collections.abc import Callable

from loop.context import budget, collapse, microcompact, snip
from loop.context.result import LayerResult
from loop.context.settings import ContextSettings, LayerState
from loop.messages import Message

ContextLayer = Callable[[tuple[Message, ...], LayerState, ContextSettings], LayerResult]
"""A layer: ``(messages, state, settings) -> LayerResult``, no I/O."""

DEFAULT_LAYERS: tuple[ContextLayer, ...] = (budget.apply, snip.apply, microcompact.apply, collapse.apply)
