"""Helpers for the loop tests: running a query to the end, and an independent pairing check.

The pairing check is written from the API's rules, not with ``loop.messages``, so a bug in the
normaliser cannot hide itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import loop
from loop.testing import FakeModel, FakeResponse, VirtualClock
from loop.tools import PermissionMode, PermissionPolicy, Tool


def blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content or [])


def pairing_violations(messages: Sequence[dict[str, Any]]) -> list[str]:
    """Every way ``messages`` breaks the tool_use/tool_result rules (empty when valid)."""
    problems: list[str] = []
    for i, message in enumerate(messages):
        content = blocks(message)
        if message.get("role") in ("user", "assistant") and not content:
            problems.append(f"message {i} has no content")
        if message.get("role") == "assistant":
            ids = [b["id"] for b in content if b.get("type") == "tool_use"]
            if not ids:
                continue
            follower = messages[i + 1] if i + 1 < len(messages) else None
            if follower is None or follower.get("role") != "user":
                problems.append(f"message {i}: tool_use {ids} not followed by a user message")
                continue
            follower_blocks = blocks(follower)
            results = [b for b in follower_blocks if b.get("type") == "tool_result"]
            if follower_blocks[: len(results)] != results:
                problems.append(f"message {i + 1}: tool_result blocks are not first")
            answered = [r.get("tool_use_id") for r in results]
            if sorted(answered) != sorted(ids):
                problems.append(f"message {i + 1}: results {answered} do not answer {ids}")
        elif message.get("role") == "user":
            previous = messages[i - 1] if i > 0 else None
            called = (
                {b.get("id") for b in blocks(previous) if b.get("type") == "tool_use"}
                if previous is not None and previous.get("role") == "assistant"
                else set()
            )
            for block in content:
                if block.get("type") == "tool_result" and block.get("tool_use_id") not in called:
                    problems.append(f"message {i}: orphan tool_result {block.get('tool_use_id')}")
    return problems


async def run_to_end(run: loop.Run) -> list[loop.LoopEvent]:
    return [event async for event in run]


def fake_run(
    script: Sequence[FakeResponse],
    *,
    tools: Sequence[Tool[Any]] = (),
    prompt: str = "do the task",
    clock: VirtualClock | None = None,
    event_delay_s: float = 0.0,
    **config: Any,
) -> tuple[loop.Run, FakeModel]:
    """A run on a ``FakeModel`` (and a ``VirtualClock``) with ``LoopConfig(**config)``."""
    clock = clock or VirtualClock()
    model = FakeModel(script, clock=clock, event_delay_s=event_delay_s)
    permissions = config.pop("permissions", PermissionPolicy(mode=PermissionMode.DONT_ASK))
    params = loop.QueryParams(
        messages=prompt,
        tools=tools,
        config=loop.LoopConfig(**config),
        deps=loop.LoopDeps(call_model=model, clock=clock),
        permissions=permissions,
    )
    return loop.query(params), model


def of_type(events: Sequence[loop.LoopEvent], kind: type[Any]) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


THINKING_TYPES = ("thinking", "redacted_thinking")


def server_tool_violations(messages: Sequence[dict[str, Any]]) -> list[str]:
    """A ``server_tool_use`` must be answered by a ``*_tool_result`` later in the same message."""
    problems: list[str] = []
    for i, message in enumerate(messages):
        content = blocks(message)
        for position, block in enumerate(content):
            if block.get("type") != "server_tool_use":
                continue
            answered = any(
                str(b.get("type", "")).endswith("_tool_result") and b.get("tool_use_id") == block.get("id")
                for b in content[position + 1 :]
            )
            if not answered:
                problems.append(f"message {i}: server tool call {block.get('id')} has no result")
    return problems


def thinking_violations(
    before: Sequence[dict[str, Any]], after: Sequence[dict[str, Any]], *, thinking_enabled: bool
) -> list[str]:
    """The three thinking rules, from the API's documentation, checked on a rewritten history:

    1. without thinking enabled, no message carries a thinking block;
    2. no message ends with a thinking block;
    3. thinking is preserved: an assistant message with thinking blocks is one of the original
       messages, unchanged, and the last assistant message (the turn the request continues) is
       kept unchanged.
    """
    problems: list[str] = []
    originals = [m for m in before if m.get("role") == "assistant"]
    for i, message in enumerate(after):
        content = blocks(message)
        has = any(b.get("type") in THINKING_TYPES for b in content)
        if has and not thinking_enabled:
            problems.append(f"message {i}: thinking blocks in a request without thinking")
        if content and content[-1].get("type") in THINKING_TYPES:
            problems.append(f"message {i}: ends with a thinking block")
        if has and message.get("role") == "assistant" and message not in originals:
            problems.append(f"message {i}: an assistant message with thinking was altered")
    if thinking_enabled and originals:
        last = originals[-1]
        if not any(m == last for m in after if m.get("role") == "assistant"):
            problems.append("the last assistant message was not kept as it was")
    return problems
