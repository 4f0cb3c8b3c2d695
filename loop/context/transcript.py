"""The history as plain text, for the summarisation call, shed until it fits a budget.

The summarisation request has no tools and no thinking, so it cannot carry ``tool_use``,
``tool_result`` or thinking blocks: the history is rendered as a transcript in one user message
(thinking omitted, calls and results as lines, images as a placeholder). When the transcript is
larger than the request may be, it is shed in the order the cheap layers would: results cut to
an excerpt (the tool-result budget), then old results dropped (microcompact) and long texts cut,
then the oldest messages left out (snip, then plain truncation) with a note saying how many —
never a summarisation request the upstream refuses for the same reason as the original.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import orjson

from loop.context.history import excerpt, result_text
from loop.messages import Block, Message, blocks_view
from loop.tokens import BYTES_PER_TOKEN_ESTIMATE


@dataclass(frozen=True, slots=True)
class Shedding:
    result_chars: int | None
    """Keep this much of each tool result (head and tail), ``None``: all of it."""
    text_chars: int | None
    """Keep this much of each text block."""
    keep_results: int | None
    """Only the newest results keep any content."""


LEVELS: tuple[Shedding, ...] = (
    Shedding(None, None, None),
    Shedding(3_000, None, None),
    Shedding(800, 4_000, 20),
    Shedding(300, 1_500, 5),
)


@dataclass(frozen=True, slots=True)
class Transcript:
    text: str
    level: int
    """How much was shed (index into ``LEVELS``; ``len(LEVELS)`` when messages were left out)."""
    omitted: int
    """Oldest messages left out."""


def render(messages: Sequence[Message], budget_tokens: int) -> Transcript:
    """The transcript of ``messages``, at most ``budget_tokens`` (upper estimate)."""
    budget = max(0, budget_tokens) * BYTES_PER_TOKEN_ESTIMATE
    for level, shedding in enumerate(LEVELS):
        chunks = _chunks(messages, shedding)
        if sum(len(c.encode()) for c in chunks) <= budget:
            return Transcript("\n\n".join(chunks), level, 0)
    chunks = _chunks(messages, LEVELS[-1])
    sizes = [len(c.encode()) + 2 for c in chunks]
    first = chunks[0][: budget // 4] if chunks else ""
    used = len(first.encode()) + 80
    kept: list[str] = []
    for chunk, size in zip(reversed(chunks[1:]), reversed(sizes[1:]), strict=True):
        if used + size > budget:
            break
        kept.append(chunk)
        used += size
    omitted = len(chunks) - 1 - len(kept)
    parts = [first] if first else []
    if omitted:
        parts.append(f"[... {omitted} earlier message(s) left out: too long to summarise ...]")
    parts.extend(reversed(kept))
    return Transcript("\n\n".join(parts), len(LEVELS), omitted)


def _chunks(messages: Sequence[Message], shedding: Shedding) -> list[str]:
    results_seen = 0
    total_results = sum(1 for m in messages for b in blocks_view(m) if b.get("type") == "tool_result")
    out: list[str] = []
    for message in messages:
        lines = [f"[{message.get('role', 'user')}]"]
        for block in blocks_view(message):
            if block.get("type") == "tool_result":
                results_seen += 1
                recent = shedding.keep_results is None or total_results - results_seen < shedding.keep_results
                lines.append(_result(block, shedding.result_chars if recent else 0))
            else:
                line = _block(block, shedding.text_chars)
                if line:
                    lines.append(line)
        out.append("\n".join(lines))
    return out


def _cut(text: str, limit: int | None) -> str:
    if limit is None:
        return text
    return excerpt(text, limit * 2 // 3, limit // 3)[0]


def _block(block: Block, text_chars: int | None) -> str:
    kind = block.get("type")
    if kind == "text":
        return _cut(str(block.get("text", "")), text_chars)
    if kind in ("thinking", "redacted_thinking"):
        return ""
    if kind in ("tool_use", "server_tool_use", "mcp_tool_use"):
        args = orjson.dumps(block.get("input", {})).decode()
        return (
            f"[called {block.get('name')} ({block.get('id')}) with {_cut(args, 500 if text_chars else None)}]"
        )
    if kind in ("image", "document"):
        return f"[{kind}]"
    if isinstance(kind, str) and kind.endswith("_tool_result"):
        payload = orjson.dumps(block.get("content", "")).decode()
        return f"[{kind} for {block.get('tool_use_id')}: {_cut(payload, text_chars or 2_000)}]"
    return f"[{kind}]"


def _result(block: Block, limit: int | None) -> str:
    status = " (error)" if block.get("is_error") is True else ""
    head = f"[result of {block.get('tool_use_id')}{status}]"
    if limit == 0:
        return f"{head} (content left out)"
    text = result_text(block)
    content = block.get("content")
    extras = (
        " [with images or documents]"
        if isinstance(content, list) and any(isinstance(b, dict) and b.get("type") != "text" for b in content)
        else ""
    )
    return f"{head}{extras}\n{_cut(text, limit)}"
