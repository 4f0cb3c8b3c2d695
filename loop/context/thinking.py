"""The thinking rules every rewritten history keeps.

1. A message with thinking blocks belongs to a request with thinking enabled: when a run's
   requests have no thinking (never had, or after a thinking downgrade), the blocks are removed.
2. A thinking block is never the last block of a message.
3. Thinking blocks are preserved across an assistant trajectory: no layer edits one; an assistant
   message is kept whole or dropped whole, and the last one (the turn the request continues) is
   always kept (it is in the protected tail).

The layers keep 2 and 3 by construction (they rewrite only ``tool_result`` blocks, or drop or keep
whole messages); :func:`strip_thinking` applies 1.
"""

from __future__ import annotations

from loop.context.history import THINKING_TYPES
from loop.messages import Message, blocks_view


def has_thinking(messages: tuple[Message, ...]) -> bool:
    # plain loops: this runs on every pass of a run without thinking, over the whole history
    for message in messages:
        if message.get("role") == "assistant":
            for block in blocks_view(message):
                if block.get("type") in THINKING_TYPES:
                    return True
    return False


def strip_thinking(messages: tuple[Message, ...]) -> tuple[Message, ...]:
    """``messages`` without thinking blocks; an assistant message left empty is dropped (the
    caller restores the pairing with ``normalize``)."""
    out: list[Message] = []
    for message in messages:
        if message.get("role") != "assistant":
            out.append(message)
            continue
        blocks = blocks_view(message)
        kept = [b for b in blocks if b.get("type") not in THINKING_TYPES]
        if len(kept) == len(blocks):
            out.append(message)
        elif kept:
            out.append({**message, "content": kept})
    return tuple(out)
