"""Layer 0, the tool-result budget: no tool result bigger than its tool allows.

Each ``tool_result`` of a tool with a finite ``max_result_size_chars`` longer than that cap is
replaced by a head + tail excerpt and a note naming its ``tool_use_id``; the whole text goes to
the session's store (``StoredText``) and the built-in ``read_tool_result`` tool reads it back, so
nothing is lost. Then the results of one message together may not exceed
``tool_results_per_message_chars``: the largest are excerpted first. Tools whose cap is ``None``
are exempt from both. During reactive compaction (the upstream refused the prompt) a message's
results may use at most a quarter of the window. Only ``tool_result`` blocks are touched.
"""

from __future__ import annotations

from collections.abc import Sequence

from loop.context.history import (
    DEFAULT_RESULT_CAP,
    STORED_NOTE,
    excerpt,
    has_non_text,
    is_marked,
    replace_block,
    result_text,
    tool_names,
)
from loop.context.kinds import Layer, Outcome
from loop.context.result import LayerResult, StoredText
from loop.context.settings import ContextSettings, LayerState
from loop.context.state import Pending
from loop.events import Compaction
from loop.messages import Block, Message, blocks_view
from loop.tokens import BYTES_PER_TOKEN_ESTIMATE, freed_tokens

NOTE_ROOM = 400
"""Characters kept free under a cap for the note itself."""


def stored_note(name: str, tool_use_id: str, total: int) -> str:
    return (
        f"{STORED_NOTE} of {name}: {total} characters, shortened to save context. The whole "
        f'result is kept: read_tool_result(tool_use_id="{tool_use_id}", offset, limit) reads '
        "any part of it.]"
    )


def shorten(text: str, cap: int, head: int, tail: int) -> str:
    """An excerpt of ``text`` whose length, note included, stays under ``cap``."""
    room = max(0, cap - NOTE_ROOM)
    if head + tail > room:
        head, tail = room * 2 // 3, room // 3
    return excerpt(text, head, tail)[0]


def apply(messages: tuple[Message, ...], state: LayerState, settings: ContextSettings) -> LayerResult:
    config = settings.config
    per_message = config.tool_results_per_message_chars
    if state.pending is Pending.REACTIVE:
        quarter = settings.thresholds(state.learned_limit).window * BYTES_PER_TOKEN_ESTIMATE // 4
        per_message = quarter if per_message is None else min(per_message, quarter)
    finite = [cap for cap in settings.tool_caps.values() if cap is not None]
    smallest = min([*finite, DEFAULT_RESULT_CAP])
    names: dict[str, str] | None = None
    out: list[Message] | None = None
    stored: list[StoredText] = []
    before = after = 0
    for position, message in enumerate(messages):
        if message.get("role") != "user":
            continue
        blocks = blocks_view(message)
        candidates = [i for i, b in enumerate(blocks) if b.get("type") == "tool_result"]
        if not candidates:
            continue
        lengths = [len(result_text(blocks[i])) for i in candidates]
        if max(lengths) <= smallest and (per_message is None or sum(lengths) <= per_message):
            continue  # nothing here can be over a cap: the common case, decided without names
        if names is None:
            names = tool_names(messages)
        new_blocks = _budget_message(blocks, candidates, names, settings, per_message, stored)
        if new_blocks is None:
            continue
        if out is None:
            out = list(messages)
        for i in candidates:
            if new_blocks[i] is not blocks[i]:
                before += len(result_text(blocks[i]))
                after += len(result_text(new_blocks[i]))
        replaced = message
        for i in candidates:
            if new_blocks[i] is not blocks[i]:
                replaced = replace_block(replaced, i, new_blocks[i])
        out[position] = replaced
    if out is None:
        return LayerResult(Layer.TOOL_RESULT_BUDGET, messages)
    freed = freed_tokens(before, after)
    event = Compaction(
        state.turn,
        Layer.TOOL_RESULT_BUDGET,
        state.tokens,
        max(0, state.tokens - freed),
        Outcome.APPLIED,
        f"{len(stored)} tool result(s) shortened and stored",
    )
    return LayerResult(Layer.TOOL_RESULT_BUDGET, tuple(out), freed, event, tuple(stored))


def _budget_message(
    blocks: Sequence[Block],
    candidates: list[int],
    names: dict[str, str],
    settings: ContextSettings,
    per_message: int | None,
    stored: list[StoredText],
) -> list[Block] | None:
    """The message's blocks with its results budgeted, or ``None`` when nothing changes."""
    config = settings.config
    new_blocks = list(blocks)
    sizes: dict[int, int] = {}
    changed = False
    for i in candidates:
        block = blocks[i]
        tool_use_id = str(block.get("tool_use_id", ""))
        name = names.get(tool_use_id, "")
        cap = settings.tool_caps.get(name, DEFAULT_RESULT_CAP)
        if cap is None:
            continue
        text = result_text(block)
        if len(text) > cap and not is_marked(text):
            shortened = _shortened(block, text, name, cap, config.excerpt_head_chars, config.excerpt_tail_chars)
            if len(result_text(shortened)) < len(text):  # a tiny cap: the note alone is longer
                new_blocks[i] = shortened
                stored.append(StoredText(tool_use_id, name, text))
                changed = True
        sizes[i] = len(result_text(new_blocks[i]))
    if per_message is not None:
        total = sum(sizes.values())
        for i in sorted(sizes, key=lambda k: sizes[k], reverse=True):
            if total <= per_message:
                break
            text = result_text(new_blocks[i])
            if is_marked(text):
                continue
            tool_use_id = str(blocks[i].get("tool_use_id", ""))
            name = names.get(tool_use_id, "")
            cap = max(NOTE_ROOM * 2, min(sizes[i] // 2, per_message // max(1, len(sizes))))
            shortened = _shortened(
                blocks[i], text, name, cap, config.excerpt_head_chars, config.excerpt_tail_chars
            )
            if len(result_text(shortened)) >= sizes[i]:
                continue  # a small result: its excerpt and note would be longer than it is
            new_blocks[i] = shortened
            stored.append(StoredText(tool_use_id, name, text))
            total -= sizes[i] - len(result_text(new_blocks[i]))
            changed = True
    return new_blocks if changed else None


def _shortened(block: Block, text: str, name: str, cap: int, head: int, tail: int) -> Block:
    body = shorten(text, cap, head, tail)
    note = stored_note(name, str(block.get("tool_use_id", "")), len(text))
    content: str | list[Block] = f"{body}\n\n{note}"
    if has_non_text(block):
        others = [b for b in block["content"] if isinstance(b, dict) and b.get("type") != "text"]
        content = [{"type": "text", "text": f"{body}\n\n{note}"}, *others]
    return {**block, "content": content}
