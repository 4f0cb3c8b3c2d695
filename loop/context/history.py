"""Reading a history the way the layers need it: tool names by id, result text, turns, the
protected tail and the notes the layers leave in place of what they removed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from loop.context.config import ContextConfig
from loop.messages import Block, Message, blocks_of, blocks_view
from loop.tokens import estimate_tokens

DEFAULT_RESULT_CAP = 50_000
"""The budget of results from tools this run does not know (histories passed in by the caller)."""

STORED_NOTE = "[Stored result"
"""Starts the note the budget layer appends to an excerpt."""
CLEARED_NOTE = "[Old tool result cleared"
"""Starts microcompact's placeholder."""
COLLAPSED_NOTE = "[Collapsed context"
"""Starts a collapse message (a summary of completed tool work, not an instruction)."""
SUMMARY_NOTE = "[Summary of the earlier conversation"
"""Starts the summary auto-compaction puts in place of the history it replaced."""

THINKING_TYPES = frozenset({"thinking", "redacted_thinking"})


def tool_names(messages: Sequence[Message]) -> dict[str, str]:
    """``tool_use_id`` -> tool name, for every ``tool_use`` block of the history."""
    names: dict[str, str] = {}
    for message in messages:
        if message.get("role") != "assistant":
            continue
        for block in blocks_view(message):
            if block.get("type") == "tool_use" and isinstance(block.get("id"), str):
                names[block["id"]] = str(block.get("name", ""))
    return names


def result_text(block: Block) -> str:
    """The text of a ``tool_result`` (its string content, or its text blocks joined)."""
    content = block.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") == "text"
        )
    return ""


def has_non_text(block: Block) -> bool:
    """A ``tool_result`` whose content has images or documents."""
    content = block.get("content")
    return isinstance(content, list) and any(isinstance(b, dict) and b.get("type") != "text" for b in content)


def is_marked(text: str) -> bool:
    """Text a layer already replaced (an excerpt, a placeholder)."""
    return STORED_NOTE in text or text.startswith(CLEARED_NOTE)


def is_results_message(message: Message) -> bool:
    """A user message holding tool results and nothing else."""
    if message.get("role") != "user":
        return False
    blocks = blocks_view(message)
    return bool(blocks) and all(b.get("type") == "tool_result" for b in blocks)


def text_of(message: Message) -> str:
    return "\n".join(str(b.get("text", "")) for b in blocks_view(message) if b.get("type") == "text")


def is_collapse_message(message: Message) -> bool:
    return message.get("role") == "user" and text_of(message).startswith(COLLAPSED_NOTE)


def assistant_indices(messages: Sequence[Message]) -> list[int]:
    return [i for i, m in enumerate(messages) if m.get("role") == "assistant"]


def protected_tail_start(messages: Sequence[Message], config: ContextConfig) -> int:
    """Where the protected tail begins: an assistant message (so every result in the tail has its
    call), covering the last ``protected_tail_turns`` turns while it stays under
    ``protected_tail_max_tokens``; the last assistant turn and everything after it always.
    Without any assistant message, the last message (the current prompt)."""
    if not messages:
        return 0
    assistants = assistant_indices(messages)
    if not assistants:
        return len(messages) - 1
    start = assistants[-1]
    size = estimate_tokens(messages[start:])
    turns = 1
    for index in reversed(assistants[:-1]):
        if turns >= config.protected_tail_turns:
            break
        extra = estimate_tokens(messages[index:start])
        if size + extra > config.protected_tail_max_tokens:
            break
        start, size, turns = index, size + extra, turns + 1
    return start


def with_content(message: Message, content: list[Block]) -> Message:
    return {**message, "content": content}


def replace_block(message: Message, index: int, block: Block) -> Message:
    blocks: list[Any] = list(blocks_of(message))
    blocks[index] = block
    return with_content(message, blocks)


def excerpt(text: str, head: int, tail: int) -> tuple[str, int]:
    """``text`` cut to its first ``head`` and last ``tail`` characters; the omitted count."""
    if len(text) <= head + tail:
        return text, 0
    omitted = len(text) - head - tail
    cut = f"{text[:head]}\n\n[... {omitted} characters omitted ...]\n\n{text[len(text) - tail :] if tail else ''}"
    return cut, omitted


def preview(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: max(0, limit - 1)] + "…"
