"""Folding mid-conversation ``role: "system"`` messages into user turns, for targets that refuse them.

Only for targets named by ``GATEWAY_FOLD_SYSTEM_MESSAGES``. A fold looks only at the message and
its predecessor, so it never changes an earlier message (a cache prefix stays a prefix).

Details: docs/internals/gateway-providers.md
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from typing import Any, Final

REMINDER: Final = "<system-reminder>\n{text}\n</system-reminder>"


def applies(patterns: Iterable[str], *models: str) -> bool:
    """Whether a fold target pattern matches any of ``models`` (``*`` matches every model)."""
    return any(fnmatch.fnmatchcase(model, pattern) for pattern in patterns for model in models if model)


def _blocks(content: Any) -> list[Any]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content) if isinstance(content, list) else []


def _reminders(content: Any) -> list[Any]:
    out: list[Any] = []
    for block in _blocks(content):
        if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
            out.append({**block, "text": REMINDER.format(text=block["text"])})
        else:
            out.append(block)
    return out


def fold_system_messages(payload: dict[str, Any]) -> bool:
    """Fold every ``role: "system"`` message of ``payload`` in place; ``True`` if any was."""
    messages = payload.get("messages")
    if not isinstance(messages, list) or not any(
        isinstance(m, dict) and m.get("role") == "system" for m in messages
    ):
        return False
    folded: list[Any] = []
    for message in messages:
        if not (isinstance(message, dict) and message.get("role") == "system"):
            folded.append(message)
            continue
        reminders = _reminders(message.get("content"))
        if not reminders:
            continue
        previous = folded[-1] if folded else None
        if isinstance(previous, dict) and previous.get("role") == "user":
            folded[-1] = {**previous, "content": [*_blocks(previous.get("content")), *reminders]}
        else:
            folded.append({"role": "user", "content": reminders})
    payload["messages"] = folded
    return True
