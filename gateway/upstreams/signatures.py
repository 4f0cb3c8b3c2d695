"""Thinking blocks on a move between providers: not replayed where their signature may not verify.

On a move to another provider, ``thinking`` / ``redacted_thinking`` blocks are left out (and
thinking itself for a tool loop that would then be refused); moves within one provider keep them.
Only the messages from before the move are concerned: the turns the new provider produced since
keep theirs.

Details: docs/internals/gateway-upstreams.md
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from gateway.cache.canonical import as_blocks, canonical, digest
from gateway.providers.base import ClientRequest

THINKING_TYPES: Final = frozenset({"thinking", "redacted_thinking"})


def conversation_slot(payload: Mapping[str, Any], session_id: str) -> str | None:
    """The key of a session's conversation: its first message (without cache markers, which move
    between turns) and the session id; ``None`` without messages."""
    messages = payload.get("messages")
    if not isinstance(messages, list) or not messages:
        return None
    return f"h:{digest(canonical(as_blocks(messages[0])))}:{session_id}"


def message_count(client: ClientRequest) -> int:
    messages = client.payload.get("messages")
    return len(messages) if isinstance(messages, list) else 0


def strip_thinking(client: ClientRequest, before: int | None = None) -> tuple[ClientRequest, int]:
    """``client`` without replayed thinking blocks in its first ``before`` messages (``None``: in
    every message), and how many were removed (0: unchanged)."""
    messages = client.payload.get("messages")
    if not isinstance(messages, list):
        return client, 0
    removed = 0
    rebuilt: list[Any] = []
    last_lost_lead = False
    for index, message in enumerate(messages):
        if before is not None and index >= before:
            rebuilt.append(message)
            if isinstance(message, dict) and message.get("role") == "assistant":
                last_lost_lead = False
            continue
        if not isinstance(message, dict) or message.get("role") != "assistant":
            rebuilt.append(message)
            continue
        content = message.get("content")
        if not isinstance(content, list):
            rebuilt.append(message)
            last_lost_lead = False
            continue
        kept = [b for b in content if not (isinstance(b, dict) and b.get("type") in THINKING_TYPES)]
        removed += len(content) - len(kept)
        first = content[0] if content else None
        lost_lead = (
            len(kept) != len(content) and isinstance(first, dict) and first.get("type") in THINKING_TYPES
        )
        last_lost_lead = lost_lead and any(isinstance(b, dict) and b.get("type") == "tool_use" for b in kept)
        if len(kept) == len(content):
            rebuilt.append(message)
        else:  # a turn that was only thinking keeps a placeholder (empty text blocks are refused)
            rebuilt.append({**message, "content": kept or [{"type": "text", "text": "[thinking omitted]"}]})
    if not removed:
        return client, 0
    payload: dict[str, Any] = {**client.payload, "messages": rebuilt}
    thinking = payload.get("thinking")
    if last_lost_lead and isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive"):
        del payload["thinking"]
    return client.with_payload(payload), removed
