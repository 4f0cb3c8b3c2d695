"""Conversation messages and the pairing invariant.

The API requires every ``tool_use`` block of an assistant message to be answered by exactly one
``tool_result`` with its id in the user message that immediately follows, the results first.
:func:`normalize` enforces that on any history, whatever path produced it (normal turns, an abort
while streaming or while tools ran, a tool crash, a model error mid-stream): it synthesises an
error result for every unanswered call, drops results that answer nothing (or answer twice), and
puts results first in call order. The loop runs it before every request and on the final history.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

JSONObject = dict[str, Any]
Message = JSONObject
Block = JSONObject

MISSING_RESULT_TEXT = "No result: this tool call did not complete."
INTERRUPTED_RESULT_TEXT = "Interrupted: the run was stopped before this tool call produced a result."
NOT_EXECUTED_RESULT_TEXT = "Not executed: the model response failed before this tool call could run."
INTERRUPTION_MESSAGE = "[Request interrupted by user]"
"""Ends the history of a run aborted while the model answered (not after a ``Run.submit``)."""
INTERRUPTION_TOOLS_MESSAGE = "[Request interrupted by user for tool use]"
"""Ends the history of a run aborted while its tools ran."""

_THINKING_TYPES = frozenset({"thinking", "redacted_thinking"})


def user_message(text: str) -> Message:
    return {"role": "user", "content": [{"type": "text", "text": text}]}


def blocks_of(message: Message) -> list[Block]:
    """A message's content as a list of blocks (string content is one text block)."""
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if isinstance(content, list):
        return [block for block in content if isinstance(block, dict)]
    return []


def blocks_view(message: Message) -> Sequence[Block]:
    """Like :func:`blocks_of`, without copying when the content is already a list of blocks: for
    reading only (the result may be the message's own list)."""
    content = message.get("content")
    if isinstance(content, list):
        for block in content:
            if type(block) is not dict:
                return [b for b in content if isinstance(b, dict)]
        return content
    return blocks_of(message)


def tool_use_ids(message: Message) -> list[str]:
    """Ids of the ``tool_use`` blocks of an assistant message, in order, without duplicates."""
    if message.get("role") != "assistant":
        return []
    seen: list[str] = []
    for block in blocks_view(message):
        if block.get("type") == "tool_use" and isinstance(block.get("id"), str) and block["id"] not in seen:
            seen.append(block["id"])
    return seen


def tool_result_block(tool_use_id: str, content: str | list[Block], *, is_error: bool = False) -> Block:
    block: Block = {"type": "tool_result", "tool_use_id": tool_use_id, "content": content}
    if is_error:
        block["is_error"] = True
    return block


def tool_results_message(results: Iterable[Block]) -> Message:
    return {"role": "user", "content": list(results)}


def synthetic_results(ids: Iterable[str], text: str) -> list[Block]:
    return [tool_result_block(tool_use_id, text, is_error=True) for tool_use_id in ids]


def completed_content(blocks: Sequence[Block]) -> list[Block]:
    """Blocks of a partial response that may be replayed: no trailing thinking block (a message
    may not end with one)."""
    kept = list(blocks)
    while kept and kept[-1].get("type") in _THINKING_TYPES:
        kept.pop()
    return kept


def without_tool_uses(blocks: Sequence[Block]) -> list[Block]:
    """A truncated response's blocks minus its calls: a truncated ``tool_use`` is never run."""
    return completed_content([b for b in blocks if b.get("type") != "tool_use"])


def _answer(ids: list[str], follower: Message | None, missing_text: str) -> Message | None:
    """The user message that must follow an assistant message calling ``ids``."""
    others: list[Block] = []
    found: dict[str, Block] = {}
    for block in blocks_view(follower) if follower is not None else []:
        if block.get("type") != "tool_result":
            others.append(block)
            continue
        tool_use_id = block.get("tool_use_id")
        if tool_use_id in ids and tool_use_id not in found:
            found[tool_use_id] = block
    results = [found.get(i) or tool_result_block(i, missing_text, is_error=True) for i in ids]
    content = results + others
    if not content:
        return None
    if follower is not None and content == follower.get("content"):
        return follower
    return {**(follower or {"role": "user"}), "content": content}


def _without_results(message: Message) -> Message | None:
    blocks = blocks_view(message)
    kept = [b for b in blocks if b.get("type") != "tool_result"]
    if len(kept) == len(blocks):
        return message
    return {**message, "content": kept} if kept else None


def normalize(
    messages: Sequence[Message], *, missing_result_text: str = MISSING_RESULT_TEXT
) -> list[Message]:
    """``messages`` with the pairing invariant restored. Unchanged messages are reused as they are;
    nothing is mutated. Idempotent."""
    out: list[Message] = []
    index = 0
    while index < len(messages):
        message = messages[index]
        index += 1
        role = message.get("role")
        if role == "assistant":
            out.append(message)
            ids = tool_use_ids(message)
            follower = messages[index] if index < len(messages) else None
            if follower is not None and follower.get("role") == "user":
                index += 1
            else:
                follower = None
            answer = _answer(ids, follower, missing_result_text)
            if answer is not None:
                out.append(answer)
        elif role == "user":
            cleaned = _without_results(message)
            if cleaned is not None:
                out.append(cleaned)
        else:
            out.append(message)
    return out
