"""Layer 2, microcompact: clear tool results no longer needed.

Only ``tool_result`` blocks change, and only when enough is freed to be worth a cache break; the
whole result is stored first. The server variant (:func:`server_edits`) is for upstreams that
accept the context-management beta.

Details: docs/internals/loop-context.md
"""

from __future__ import annotations

from loop.context.history import (
    CLEARED_NOTE,
    STORED_NOTE,
    assistant_indices,
    has_non_text,
    protected_tail_start,
    replace_block,
    result_text,
    tool_names,
)
from loop.context.kinds import Layer, Outcome
from loop.context.result import LayerResult, StoredText
from loop.context.settings import ContextSettings, LayerState
from loop.events import Compaction
from loop.messages import JSONObject, Message, blocks_view
from loop.tokens import freed_tokens

CONTEXT_MANAGEMENT_BETA = "context-management-2025-06-27"
CLEAR_TOOL_USES = "clear_tool_uses_20250919"
MIN_CLEARABLE_CHARS = 400
"""Smaller results are left alone: the placeholder would not be much shorter."""
SERVER_EDIT_PROVIDERS = frozenset({"anthropic", "foundry", "bedrock"})


def placeholder(name: str, tool_use_id: str, total: int) -> str:
    return (
        f"{CLEARED_NOTE} to save context: the {name} result ({total} characters) is kept; "
        f'read_tool_result(tool_use_id="{tool_use_id}") returns it.]'
    )


def trigger_tokens(state: LayerState, settings: ContextSettings) -> int:
    threshold = settings.thresholds(state.learned_limit).autocompact
    return int(threshold * settings.config.microcompact_trigger_ratio)


def min_free_tokens(state: LayerState, settings: ContextSettings) -> int:
    threshold = settings.thresholds(state.learned_limit).autocompact
    return min(settings.config.microcompact_min_free_tokens, threshold // 10)


def apply(messages: tuple[Message, ...], state: LayerState, settings: ContextSettings) -> LayerResult:
    forced = state.pending is not None
    if not forced and (settings.server_edits or state.tokens < trigger_tokens(state, settings)):
        return LayerResult(Layer.MICROCOMPACT, messages)
    targets = _clearable(messages, settings, forced)
    if not targets:
        return LayerResult(Layer.MICROCOMPACT, messages)
    names = tool_names(messages)
    out = list(messages)
    stored: list[StoredText] = []
    before = after = 0
    for position, index in targets:
        block = blocks_view(out[position])[index]
        tool_use_id = str(block.get("tool_use_id", ""))
        name = names.get(tool_use_id, "tool")
        text = result_text(block)
        if STORED_NOTE not in text:
            stored.append(StoredText(tool_use_id, name, text))
        replacement = placeholder(name, tool_use_id, len(text))
        cleared: JSONObject = {**block, "content": replacement}
        out[position] = replace_block(out[position], index, cleared)
        before += len(text)
        after += len(replacement)
    freed = freed_tokens(before, after)
    if not forced and freed < min_free_tokens(state, settings):
        return LayerResult(Layer.MICROCOMPACT, messages)
    event = Compaction(
        state.turn,
        Layer.MICROCOMPACT,
        state.tokens,
        max(0, state.tokens - freed),
        Outcome.APPLIED,
        f"cleared {len(targets)} old tool result(s)",
    )
    return LayerResult(Layer.MICROCOMPACT, tuple(out), freed, event, tuple(stored))


def _clearable(
    messages: tuple[Message, ...], settings: ContextSettings, forced: bool
) -> list[tuple[int, int]]:
    """``(message index, block index)`` of the results microcompact may clear, oldest first."""
    config = settings.config
    assistants = assistant_indices(messages)
    boundary = protected_tail_start(messages, config)
    if not forced and config.microcompact_min_age_turns:
        recent = assistants[-config.microcompact_min_age_turns :] if assistants else []
        if recent:
            boundary = min(boundary, recent[0])
    found: list[tuple[int, int]] = []
    newer = 0
    for position, message in enumerate(messages):
        if message.get("role") != "user":
            continue
        for index, block in enumerate(blocks_view(message)):
            if block.get("type") != "tool_result":
                continue
            if position >= boundary:
                newer += 1
                continue
            text = result_text(block)
            if text.startswith(CLEARED_NOTE):
                continue
            if len(text) < MIN_CLEARABLE_CHARS and not has_non_text(block):
                continue
            found.append((position, index))
    keep = 0 if forced else max(0, config.microcompact_keep_results - newer)
    return found[: max(0, len(found) - keep)]


def server_edits(settings: ContextSettings, learned_limit: int | None) -> JSONObject:
    """The request's ``context_management`` for the server variant."""
    state = LayerState(turn=0, tokens=0, learned_limit=learned_limit)
    edit: JSONObject = {
        "type": CLEAR_TOOL_USES,
        "trigger": {"type": "input_tokens", "value": max(1, trigger_tokens(state, settings))},
        "keep": {"type": "tool_uses", "value": settings.config.microcompact_keep_results},
        "clear_at_least": {"type": "input_tokens", "value": min_free_tokens(state, settings)},
    }
    return {"edits": [edit]}
