"""Read-only views of a request's ``messages`` that the scripted model needs."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .json_types import JSONObject


@dataclass(frozen=True, slots=True)
class ToolResult:
    """A ``tool_result`` block of the last user message, joined to the call it answers."""

    tool_use_id: str
    tool_name: str | None
    text: str
    is_error: bool


def _blocks(message: Any) -> list[JSONObject]:
    if not isinstance(message, dict):
        return []
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or [] if isinstance(b, dict)]


def _user_messages_reversed(messages: list[JSONObject]) -> Iterator[JSONObject]:
    return (m for m in reversed(messages) if m.get("role") == "user")


def content_text(content: Any) -> str:
    """The concatenated text of a string or a list of blocks (nested ``tool_result`` content too)."""
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content or []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text":
            parts.append(str(block.get("text", "")))
        elif block.get("type") == "tool_result":
            parts.append(content_text(block.get("content")))
    return "\n".join(p for p in parts if p)


def prompt_turn(messages: list[JSONObject]) -> tuple[int, str]:
    """Where the most recent user turn with text of its own starts, and its text (``(0, "")``
    when there is none).

    Consecutive user messages are one turn (the API merges them): a client that adds a message of
    its own after the user's prompt (a digest of earlier work, a reminder) does not hide the
    prompt. Turns holding only ``tool_result`` blocks are skipped, so a scenario or tool directive
    in the user's prompt stays in force for the whole tool round trip that follows it.
    """
    index = len(messages) - 1
    while index >= 0:
        if messages[index].get("role") != "user":
            index -= 1
            continue
        start = index
        while start > 0 and messages[start - 1].get("role") == "user":
            start -= 1
        texts = [
            str(b.get("text", ""))
            for message in messages[start : index + 1]
            for b in _blocks(message)
            if b.get("type") == "text"
        ]
        if any(t.strip() for t in texts):
            return start, "\n".join(texts)
        index = start - 1
    return 0, ""


def prompt_text(messages: list[JSONObject]) -> str:
    """The text of the most recent user turn that has text of its own (see :func:`prompt_turn`)."""
    return prompt_turn(messages)[1]


def tool_names_by_id(messages: list[JSONObject]) -> dict[str, str]:
    """``tool_use`` id → tool name, over every assistant message."""
    names: dict[str, str] = {}
    for message in messages:
        if message.get("role") != "assistant":
            continue
        for block in _blocks(message):
            if block.get("type") == "tool_use" and isinstance(block.get("id"), str):
                names[block["id"]] = str(block.get("name", ""))
    return names


def last_tool_results(messages: list[JSONObject]) -> list[ToolResult]:
    """The ``tool_result`` blocks of the last user message (empty if it has none)."""
    last = next(_user_messages_reversed(messages), None)
    if last is None:
        return []
    names = tool_names_by_id(messages)
    return [
        ToolResult(
            tool_use_id=str(b.get("tool_use_id", "")),
            tool_name=names.get(str(b.get("tool_use_id", ""))),
            text=content_text(b.get("content")),
            is_error=b.get("is_error") is True,
        )
        for b in _blocks(last)
        if b.get("type") == "tool_result"
    ]


def last_answered_tool(messages: list[JSONObject]) -> str | None:
    """The tool whose call got the conversation's most recent ``tool_result``, if any."""
    names = tool_names_by_id(messages)
    for message in reversed(messages):
        if message.get("role") != "user":
            continue
        for block in reversed(_blocks(message)):
            if block.get("type") == "tool_result":
                name = names.get(str(block.get("tool_use_id", "")))
                if name is not None:
                    return name
    return None


def answered_tool_names(messages: list[JSONObject]) -> set[str]:
    """Names of tools whose calls have received a ``tool_result`` anywhere in the conversation."""
    names = tool_names_by_id(messages)
    answered: set[str] = set()
    for message in messages:
        if message.get("role") != "user":
            continue
        for block in _blocks(message):
            if block.get("type") == "tool_result":
                name = names.get(str(block.get("tool_use_id", "")))
                if name is not None:
                    answered.add(name)
    return answered
