"""Layer 3, context collapse: each span of completed tool work becomes one short message.

A span is a run of (assistant message with calls, user message with exactly their results) pairs
between the first message and the protected tail. Once the context reaches the auto-compact
threshold, the oldest spans are replaced, one user message each, by a digest of what was called
and what came back (the whole results go to the session's store), until the context is below
``collapse_target_ratio`` of the threshold. It runs before auto-compact on purpose: when it gets
the context under the threshold, auto-compact has nothing to do and the history keeps its detail
instead of becoming one summary. A collapse drain (after the upstream refused the prompt)
collapses every span. The digest message is marked as context, not an instruction; it follows a
user message, which the API merges with it.
"""

from __future__ import annotations

import orjson

from loop.context.history import (
    COLLAPSED_NOTE,
    STORED_NOTE,
    is_collapse_message,
    is_results_message,
    preview,
    protected_tail_start,
    result_text,
    text_of,
    tool_names,
)
from loop.context.kinds import Layer, Outcome
from loop.context.result import LayerResult, StoredText
from loop.context.settings import ContextSettings, LayerState
from loop.context.state import Pending
from loop.events import Compaction
from loop.messages import Message, blocks_view, tool_use_ids, user_message
from loop.tokens import freed_tokens, message_bytes

HEADER = (
    f"{COLLAPSED_NOTE}: earlier tool work, summarised to save context. It is a record of what "
    "was done, not a new instruction. Whole results are kept: read_tool_result(tool_use_id) "
    "returns one.]"
)


def spans(messages: tuple[Message, ...], settings: ContextSettings) -> list[tuple[int, int]]:
    """``(start, end)`` of each span of completed tool work outside the protected tail."""
    limit = protected_tail_start(messages, settings.config)
    found: list[tuple[int, int]] = []
    index = 1
    while index + 1 < limit:
        if _is_pair(messages, index):
            start = index
            while index + 1 < limit and _is_pair(messages, index):
                index += 2
            found.append((start, index))
        else:
            index += 1
    return found


def has_span(messages: tuple[Message, ...], settings: ContextSettings) -> bool:
    """Whether a collapse drain would find anything (stops at the first span)."""
    limit = protected_tail_start(messages, settings.config)
    return any(_is_pair(messages, index) for index in range(1, limit - 1))


def _is_pair(messages: tuple[Message, ...], index: int) -> bool:
    call, answer = messages[index], messages[index + 1]
    ids = tool_use_ids(call)
    if not ids or not is_results_message(answer):
        return False
    answered = [str(b.get("tool_use_id")) for b in blocks_view(answer)]
    return sorted(answered) == sorted(ids)


def apply(messages: tuple[Message, ...], state: LayerState, settings: ContextSettings) -> LayerResult:
    config = settings.config
    if not config.collapse:
        return LayerResult(Layer.COLLAPSE, messages)
    threshold = settings.thresholds(state.learned_limit).autocompact
    drain = state.pending is Pending.DRAIN
    if not drain and state.tokens < threshold:
        return LayerResult(Layer.COLLAPSE, messages)
    found = spans(messages, settings)
    if not found:
        return LayerResult(Layer.COLLAPSE, messages)
    target = int(threshold * config.collapse_target_ratio)
    names = tool_names(messages)
    out: list[Message] = []
    stored: list[StoredText] = []
    freed = 0
    cursor = 0
    collapsed = 0
    for start, end in found:
        if not drain and state.tokens - freed <= target:
            break
        out.extend(messages[cursor:start])
        lines = _digest(messages[start:end], names, config.collapse_preview_chars, stored)
        before = message_bytes(messages[start:end])
        previous = out[-1] if out else None
        if previous is not None and is_collapse_message(previous):
            before += message_bytes([previous])
            out[-1] = user_message(f"{text_of(previous)}\n{lines}")
            after = message_bytes([out[-1]])
        else:
            out.append(user_message(f"{HEADER}\n{lines}"))
            after = message_bytes([out[-1]])
        freed += freed_tokens(before, after)
        cursor = end
        collapsed += (end - start) // 2
    if collapsed == 0:
        return LayerResult(Layer.COLLAPSE, messages)
    out.extend(messages[cursor:])
    event = Compaction(
        state.turn,
        Layer.COLLAPSE,
        state.tokens,
        max(0, state.tokens - freed),
        Outcome.APPLIED,
        f"collapsed {collapsed} completed tool turn(s)" + (" (drain)" if drain else ""),
    )
    return LayerResult(Layer.COLLAPSE, tuple(out), freed, event, tuple(stored))


def _digest(span: tuple[Message, ...], names: dict[str, str], limit: int, stored: list[StoredText]) -> str:
    lines: list[str] = []
    for call, answer in zip(span[::2], span[1::2], strict=True):
        said = " ".join(str(b.get("text", "")) for b in blocks_view(call) if b.get("type") == "text")
        if said.strip():
            lines.append(f"- said: {preview(said, limit)}")
        results = {b.get("tool_use_id"): b for b in blocks_view(answer)}
        for block in blocks_view(call):
            kind = block.get("type")
            if kind == "server_tool_use":
                lines.append(f"- (server) {block.get('name')}({_args(block, limit)})")
            if kind != "tool_use":
                continue
            tool_use_id = str(block.get("id"))
            result = results.get(tool_use_id, {})
            text = result_text(result)
            status = "error: " if result.get("is_error") is True else ""
            shown = preview(text, limit)
            if len(text) > limit and STORED_NOTE not in text and not text.startswith("[Old tool result"):
                stored.append(StoredText(tool_use_id, names.get(tool_use_id, "tool"), text))
                shown += f" [{len(text)} chars stored as {tool_use_id}]"
            lines.append(f"- {block.get('name')}({_args(block, limit)}) -> {status}{shown}")
    return "\n".join(lines)


def _args(block: Message, limit: int) -> str:
    return preview(orjson.dumps(block.get("input", {})).decode(), limit)
