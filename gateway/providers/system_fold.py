"""Folding mid-conversation ``role: "system"`` messages into user turns, for targets that refuse them.

Claude Code 2.1.332 sends ``role: "system"`` messages to Bedrock and Vertex as they are (its own
provider modes, providers.md section 7), so by default nothing is folded. Claude Code 2.1.197 put
the same text into ``<system-reminder>`` text blocks of a user turn instead (fixtures README 1.4).
``GATEWAY_FOLD_SYSTEM_MESSAGES`` names the targets that refuse the role (``*``, or ``fnmatch``
patterns of the client's or the upstream's model id); for those, each system message becomes
``{"type": "text", "text": "<system-reminder>\\n...\\n</system-reminder>"}`` blocks (a block's
other keys, such as its ``cache_control`` breakpoint, stay; message-level keys such as
``output_config`` go):

* appended to the message just before it when that is a user turn (where Claude Code places them:
  after the user's prompt, before the answer), so the model reads them at the same point;
* otherwise (first message, or after an assistant turn) the blocks become a user turn of their own
  in the same place; the API combines consecutive user turns.

The rule looks only at the message and its predecessor, so a fold never changes an earlier
message: turn N+1's folded history starts with turn N's (a cache prefix stays a prefix).
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
