"""Several conversations under one session id (Claude Code's side calls and sub-agents carry the main
conversation's), each compared with its own last request: no false break when they interleave, and
a real break in one of them still named (the pipeline and the memory store, real usage figures)."""

from __future__ import annotations

from typing import Any

import orjson

from emulators.clock import ManualClock
from gateway.cache.pipeline import CachePipeline
from gateway.cache.session_store import MemorySessionStore
from gateway.config import Settings
from gateway.providers.base import ClientRequest, Operation
from gateway.streaming.usage import Usage

SYSTEM = [{"type": "text", "text": "You are an explorer. " * 200, "cache_control": {"type": "ephemeral"}}]
TOOLS = [{"name": "grep", "description": "grep", "input_schema": {"type": "object"}}]


def request(messages: list[Any], *, system: Any = SYSTEM, tools: Any = TOOLS) -> ClientRequest:
    body = {"model": "claude-opus-4-5", "max_tokens": 10, "system": system, "tools": tools, "messages": messages}
    raw = orjson.dumps(body)
    return ClientRequest(Operation.MESSAGES, raw, orjson.loads(raw), [("x-claude-code-session-id", "s")], "r")


def pipeline() -> tuple[CachePipeline, list[str]]:
    settings = Settings.from_environ({"ANTHROPIC_API_KEY": "k"})
    clock = ManualClock(1_800_000_000.0)
    breaks: list[str] = []
    store = MemorySessionStore(10, 3600, clock=clock.time)
    return CachePipeline(settings.cache, "anthropic", store, on_break=breaks.append, clock=clock.time), breaks


def conversation(first: str, turns: int) -> list[Any]:
    """``turns`` exchanges after ``first``; the breakpoint on the last message, as Claude Code's."""
    texts = [first]
    for turn in range(turns):
        texts += [f"{first}: answer {turn}", f"{first}: more {turn}"]
    messages: list[Any] = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": [{"type": "text", "text": text}]}
        for i, text in enumerate(texts)
    ]
    messages[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
    return messages


async def test_parallel_sub_agents_of_one_kind_are_told_apart_by_their_first_message() -> None:
    """Same system prompt and tools, their own first message, interleaved; each turn reads all its
    own last turn cached (the system prompt and tools, 2,000 tokens, are all the other shares)."""
    pipe, breaks = pipeline()
    cached = {"X": 0, "Y": 0}
    for turn in range(3):
        for name, size in (("X", 6000), ("Y", 3000)):
            _, context = await pipe.before(request(conversation(name, turn)), "team")
            total = size + 100 * turn
            read = cached[name] or 2000
            pipe.after(context, Usage(cache_read_input_tokens=read, cache_write_5m_tokens=total - read), 200, "x")
            cached[name] = total
    # Y's first turn matches X's conversation by system prompt and tools only (a compaction of X
    # would look the same): one break, and X's record is kept; every later turn is compared with
    # its own conversation's
    assert breaks == ["messages_edited"]


async def test_tools_and_system_changed_at_once_is_still_a_break_of_that_conversation() -> None:
    pipe, breaks = pipeline()
    _, context = await pipe.before(request(conversation("A", 0)), "team")
    pipe.after(context, Usage(cache_read_input_tokens=0, cache_write_5m_tokens=5000), 200, "x")
    system = [{"type": "text", "text": "You are an explorer, v2. " * 200, "cache_control": {"type": "ephemeral"}}]
    tools = [*TOOLS, {"name": "mcp__x__y", "description": "y", "input_schema": {"type": "object"}}]
    _, context = await pipe.before(request(conversation("A", 1), system=system, tools=tools), "team")
    reason = pipe.after(context, Usage(cache_read_input_tokens=0, cache_write_5m_tokens=5200), 200, "x")
    assert (reason, breaks) == ("tools_changed", ["first_request", "tools_changed"])


async def test_a_compaction_is_named_though_a_side_conversation_came_between() -> None:
    pipe, breaks = pipeline()
    for messages, system, read, written in (
        (conversation("main", 2), SYSTEM, 0, 8000),
        (conversation("side", 0), [{"type": "text", "text": "Side. " * 300}], 0, 0),
        (conversation("summary of main", 0), SYSTEM, 2000, 1000),  # main, compacted
    ):
        _, context = await pipe.before(request(messages, system=system), "team")
        pipe.after(context, Usage(cache_read_input_tokens=read, cache_write_5m_tokens=written), 200, "x")
    assert breaks == ["first_request", "first_request", "compaction"]  # (the side's own first request)
