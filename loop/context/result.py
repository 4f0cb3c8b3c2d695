"""What a layer returns: the new history, what it freed, its event, what to store, or a failure."""

from __future__ import annotations

from dataclasses import dataclass

from loop.context.kinds import Layer
from loop.events import Compaction, ContextBoundary
from loop.messages import Message


@dataclass(frozen=True, slots=True)
class StoredText:
    """A tool result taken out of the history, kept whole in the session's store under its
    ``tool_use_id`` so the model can read it back (``read_tool_result``)."""

    tool_use_id: str
    tool: str
    text: str


@dataclass(frozen=True, slots=True)
class LayerResult:
    layer: Layer
    messages: tuple[Message, ...]
    """The history after the layer (the input itself when it did nothing)."""
    tokens_freed: int = 0
    event: ContextBoundary | Compaction | None = None
    stored: tuple[StoredText, ...] = ()
    failure: str | None = None

    @property
    def changed(self) -> bool:
        return self.event is not None and self.failure is None


def unchanged(layer: Layer, messages: tuple[Message, ...]) -> LayerResult:
    return LayerResult(layer, messages)
