"""The history hashes a session's previous request already computed are reused, exactly when its
history is unchanged, and the cache step hashes only what is new (gateway.cache.history)."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import orjson
import pytest

from bench.cc_session import ClaudeCodeSession
from emulators.clock import ManualClock
from gateway.cache.history import scan_messages
from gateway.cache.latches import DEFAULT_LATCHED_BETAS
from gateway.cache.pipeline import CachePipeline
from gateway.cache.prefix import PrefixHashes, prefix_hashes
from gateway.cache.session_store import MemorySessionStore
from gateway.config import Settings
from gateway.providers.base import ClientRequest, Operation
from gateway.streaming.usage import Usage
from tests.cache import reference
from tests.support.cache_turns import TOOL_BASH, Turn

BETAS = ["context-1m-2025-08-07"]


def reused(previous: PrefixHashes, current: PrefixHashes) -> int:
    """How many of ``current``'s history hashes are ``previous``'s own objects (not recomputed)."""
    return sum(1 for a, b in zip(previous.messages, current.messages, strict=False) if a is b)


def grow(session: ClaudeCodeSession, turn: int) -> None:
    tool_id = f"toolu_{turn:04d}"
    session.add_answer(
        [
            {"type": "text", "text": f"step {turn}"},
            {"type": "tool_use", "id": tool_id, "name": "Bash", "input": {"command": f"ls {turn}"}},
        ]
    )
    session.add_tool_results([(tool_id, f"output {turn}\n" * 5)])


@pytest.mark.parametrize("provider", ["anthropic", "bedrock"])
async def test_a_claude_code_session_hashes_only_its_new_messages(provider: str) -> None:
    """Turn after turn (the billing block's cch changes every request; on Bedrock it is pinned and
    the global scope removed, so the body sent is an edited copy), the hashes are the reference's
    and every turn after the first reuses all of the previous request's but its last."""
    settings = Settings.from_environ({"ANTHROPIC_API_KEY": "k"})
    clock = ManualClock(1_800_000_000.0)
    store = MemorySessionStore(10, 3600, clock=clock.time)
    pipeline = CachePipeline(settings.cache, provider, store, on_break=lambda reason: None, clock=clock.time)
    session = ClaudeCodeSession.from_fixture()
    previous: PrefixHashes | None = None
    for turn in range(6):
        raw = orjson.dumps({**session.other_fields, **session.next_request()})
        client = ClientRequest(
            Operation.MESSAGES, raw, orjson.loads(raw), list(session.headers().items()), "r"
        )
        sent, context = await pipeline.before(client, "default")
        assert context.hashes is not None
        betas = [b for k, v in sent.headers if k == "anthropic-beta" for b in v.split(",")]
        latched = [b for b in betas if b in DEFAULT_LATCHED_BETAS]
        assert context.hashes == reference.prefix_hashes(sent.payload, latched)
        assert (sent.payload is client.payload) is (provider == "anthropic")
        if previous is not None:
            assert reused(previous, context.hashes) == len(previous.messages) - 1 > 0
        pipeline.after(context, Usage(cache_read_input_tokens=100, cache_write_5m_tokens=10), 200, provider)
        previous = context.hashes
        clock.advance(5)
        grow(session, turn)


def test_only_a_matching_check_lets_hashes_be_reused() -> None:
    """The previous request's hashes are taken as they are once the check matches (shown here with
    hashes that are not the real ones), and not at all when an older message changed."""
    turns = [Turn.load(name).body for name in TOOL_BASH]
    before = prefix_hashes(turns[1], BETAS)
    fake = dataclasses.replace(before, messages=tuple(f"fake{i}" for i in range(len(before.messages))))
    current = prefix_hashes(turns[2], BETAS, previous=fake)
    shared = len(before.messages) - 1
    assert current.messages[:shared] == fake.messages[:shared]  # reused as they were
    assert (
        current.messages[shared:] != reference.prefix_hashes(turns[2], BETAS).messages[shared:]
    )  # chained on

    edited = copy.deepcopy(turns[2])
    edited["messages"][1]["content"] += " (edited)"  # the mid-conversation system message
    assert prefix_hashes(edited, BETAS, previous=fake) == reference.prefix_hashes(edited, BETAS)
    # the message whose breakpoint moved on is not part of the check: its hash is recomputed
    assert prefix_hashes(turns[2], BETAS, previous=before) == reference.prefix_hashes(turns[2], BETAS)


def test_a_record_without_a_check_is_compared_and_hashed_in_full() -> None:
    """The check is not part of the record (Redis stores it beside it, so that earlier versions
    still read the record): a record read without it reuses nothing."""
    turns = [Turn.load(name).body for name in TOOL_BASH]
    hashes = prefix_hashes(turns[1], BETAS)
    assert b"history_check" not in hashes.to_json()
    older = PrefixHashes.from_json(hashes.to_json())
    assert older == hashes and older.history_check == ""
    current = prefix_hashes(turns[2], BETAS, previous=older)
    assert reused(older, current) == 0 and current == reference.prefix_hashes(turns[2], BETAS)
    restored = PrefixHashes.from_json(hashes.to_json(), hashes.history_check)
    assert reused(restored, prefix_hashes(turns[2], BETAS, previous=restored)) == len(hashes.messages) - 1


def test_the_scan_walks_only_messages_that_can_hold_a_marker() -> None:
    body: dict[str, Any] = {
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": 'a "cache_control":{"type":"ephemeral"} text'}],
            },
            {"role": "assistant", "content": "ok"},
            {
                "role": "user",
                "content": [{"type": "text", "text": "b", "cache_control": {"type": "ephemeral"}}],
            },
            {"role": "assistant", "content": [{"type": "text", "text": "c", "cache_control": None}]},
            {"role": "user", "content": "d"},
        ]
    }
    assert scan_messages(body).marked == (2, 4)  # a text that mentions a marker is text
    assert scan_messages(body, 1).marked == (1, 2, 3, 4)  # the newer messages are always walked
    assert scan_messages({"messages": "not a list"}).marked == ()


async def test_a_request_without_a_session_is_forwarded_untouched_and_not_hashed() -> None:
    settings = Settings.from_environ({"ANTHROPIC_API_KEY": "k"})
    pipeline = CachePipeline(settings.cache, "anthropic", MemorySessionStore(10, 60), on_break=lambda reason: None)
    turn = Turn.load("015_cc_tool_bash_turn1").with_session(None)
    client = ClientRequest(Operation.MESSAGES, turn.wire(), turn.body, list(turn.headers), "r")
    sent, context = await pipeline.before(client, "default")
    assert sent is client and context.session_id is None and context.hashes is None
    assert pipeline.after(context, Usage(), 200, "anthropic") is None
