"""Layer 1, snip: drop the oldest turns once the history holds more than ``snip_max_turns``
assistant turns.

It removes whole turns between the first message (the task, or the summary a compaction left) and
the turn it keeps first, never the protected tail, and goes ``snip_batch_turns`` below the limit
so that it acts rarely (each snip rewrites the start of the history, one cache write of all of
it). The ``ContextBoundary`` it yields tells a UI to drop those messages; the tokens it freed are
taken off the estimate the auto-compact decision of the same pass reads.
"""

from __future__ import annotations

from loop.context.history import assistant_indices, protected_tail_start
from loop.context.kinds import Layer
from loop.context.result import LayerResult
from loop.context.settings import ContextSettings, LayerState
from loop.events import ContextBoundary
from loop.messages import Message
from loop.tokens import freed_tokens, message_bytes


def apply(messages: tuple[Message, ...], state: LayerState, settings: ContextSettings) -> LayerResult:
    config = settings.config
    limit = config.snip_max_turns
    assistants = assistant_indices(messages)
    if limit is None or len(assistants) <= limit:
        return LayerResult(Layer.SNIP, messages)
    keep_turns = max(config.protected_tail_turns, limit - config.snip_batch_turns)
    cut = min(assistants[len(assistants) - keep_turns], protected_tail_start(messages, config))
    if cut <= 1:
        return LayerResult(Layer.SNIP, messages)
    removed = messages[1:cut]
    freed = freed_tokens(message_bytes(removed), 0)
    turns = sum(1 for m in removed if m.get("role") == "assistant")
    event = ContextBoundary(
        state.turn,
        Layer.SNIP,
        freed,
        len(removed),
        f"dropped the {turns} oldest turn(s) ({len(removed)} messages); {len(assistants) - turns} kept",
    )
    return LayerResult(Layer.SNIP, (messages[0], *messages[cut:]), freed, event)
