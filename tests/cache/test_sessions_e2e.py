"""Sessions and sticky latches through a real gateway in front of the first-party emulator."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cache_stack import CacheStack, cache_stack, upstream_betas
from tests.support.cache_turns import Turn, claude_code_session

LATCHED = "context-1m-2025-08-07"


@pytest.fixture
async def stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[CacheStack]:
    async with cache_stack("anthropic", tmp_path, monkeypatch) as built:
        yield built


def upstream_markers(stack: CacheStack, index: int = -1) -> list[dict[str, Any]]:
    body = stack.model_requests()[index].json()
    return Turn([], body).markers()


async def test_a_latched_beta_dropped_by_the_client_still_reaches_the_upstream(stack: CacheStack) -> None:
    turns = claude_code_session("latch-1")
    first = await stack.send(turns[0])
    assert first.status == 200
    second = await stack.send(turns[1].without_betas(LATCHED))
    third = await stack.send(turns[2].without_betas(LATCHED))
    assert second.status == third.status == 200
    sent = [upstream_betas(r) for r in stack.model_requests()]
    assert sent[0] == turns[0].betas  # nothing to add: the client's header as sent
    for upstream, turn in zip(sent[1:], turns[1:], strict=True):
        assert upstream == [*turn.without_betas(LATCHED).betas, LATCHED]  # appended after the client's
    assert third.read == second.cached > 0  # the toggle cost no cache
    assert stack.breaks() == {"first_request": 1}
    status, session = await stack.session("latch-1")
    assert status == 200
    assert LATCHED in session["latches"]["betas"]
    assert "claude-code-20250219" not in session["latches"]["betas"]  # not a cache-key beta


async def test_the_1h_ttl_decided_first_is_kept_when_the_client_drops_it(stack: CacheStack) -> None:
    first = Turn.load("025_cc_firstparty_1h_turn1")
    second = Turn.load("026_cc_firstparty_1h_turn2")
    for block in second.body["system"][2:]:
        block["cache_control"] = {"type": "ephemeral"}  # no ttl, no scope any more
    second.body["messages"][-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
    assert (await stack.send(first)).status == 200
    answer = await stack.send(second)
    assert answer.status == 200
    assert upstream_markers(stack) == [{"type": "ephemeral", "ttl": "1h"}] * 3
    usage = answer.usage
    assert (
        usage["cache_creation"]["ephemeral_5m_input_tokens"]
        == 0
        < usage["cache_creation"]["ephemeral_1h_input_tokens"]
    )
    status, session = await stack.session(first.header("X-Claude-Code-Session-Id") or "")
    assert (
        status == 200 and session["latches"]["ttl_1h"] is True and session["latches"]["global_scope"] is True
    )


async def test_the_5m_ttl_decided_first_is_kept_when_the_client_asks_for_the_hour(stack: CacheStack) -> None:
    turns = claude_code_session("ttl-5m")
    assert (await stack.send(turns[0])).status == 200
    for block in turns[1].markers():
        block["ttl"] = "1h"
    answer = await stack.send(turns[1])
    assert answer.status == 200
    assert upstream_markers(stack) == [{"type": "ephemeral"}] * 3
    assert answer.read > 0 and stack.breaks() == {"first_request": 1}


async def test_a_title_side_call_first_does_not_switch_the_hour_off(stack: CacheStack) -> None:
    main = Turn.load("025_cc_firstparty_1h_turn1")
    title = Turn.load("074_cc_interactive_title_generation").with_session(
        main.header("X-Claude-Code-Session-Id")
    )
    assert (await stack.send(title)).status == 200
    assert (await stack.send(main)).status == 200
    assert stack.model_requests()[-1].body == main.wire()  # 1h and global scope as the client sent them


async def test_no_session_id_means_no_latching(stack: CacheStack) -> None:
    turns = [t.with_session(None) for t in claude_code_session("unused")]
    assert turns[0].header("X-Claude-Code-Session-Id") is None and "metadata" not in turns[0].body
    assert (await stack.send(turns[0])).status == 200
    assert (await stack.send(turns[1].without_betas(LATCHED))).status == 200
    assert LATCHED not in upstream_betas(stack.model_requests()[-1])
    assert stack.breaks() == {}


@pytest.mark.parametrize("source", ["metadata", "x-session-id"])
async def test_the_session_id_also_comes_from_metadata_or_x_session_id(
    stack: CacheStack, source: str
) -> None:
    turns = claude_code_session("from-elsewhere")
    for turn in turns:
        turn.set_header("X-Claude-Code-Session-Id", None)
        if source == "x-session-id":
            del turn.body["metadata"]
            turn.set_header("x-session-id", "from-elsewhere")
    assert (await stack.send(turns[0])).status == 200
    assert (await stack.send(turns[1].without_betas(LATCHED))).status == 200
    assert LATCHED in upstream_betas(stack.model_requests()[-1])
    status, _ = await stack.session("from-elsewhere")
    assert status == 200


async def test_session_endpoint(stack: CacheStack) -> None:
    turns = claude_code_session("inspect-me")
    for turn in turns:
        assert (await stack.send(turn)).status == 200
    status, body = await stack.session("inspect-me", key=None)
    assert status == 401 and body["error"]["type"] == "authentication_error"
    status, body = await stack.session("never-seen")
    assert status == 404 and body["type"] == "error" and body["error"]["type"] == "not_found_error"
    status, body = await stack.session("inspect-me")
    assert status == 200
    assert body["session_id"] == "inspect-me"
    assert set(body["latches"]["betas"]) == {
        "context-1m-2025-08-07",
        "interleaved-thinking-2025-05-14",
        "context-management-2025-06-27",
        "prompt-caching-scope-2026-01-05",
        "mid-conversation-system-2026-04-07",
        "effort-2025-11-24",
    }
    assert body["latches"]["ttl_1h"] is False and body["latches"]["global_scope"] is False
    last = body["last_request"]
    assert last["prefix"]["messages"] == 6 and last["prefix"]["model"] == "claude-opus-4-8"
    assert last["prefix"]["ttls"] == ["5m", "5m", "5m"]
    assert last["cached_tokens"] > 0 and last["at"] == pytest.approx(stack.clock.time())
    assert [b["reason"] for b in body["recent_breaks"]] == ["first_request"]


async def test_five_breakpoints_are_trimmed_instead_of_a_400(
    stack: CacheStack, caplog: pytest.LogCaptureFixture
) -> None:
    turn = claude_code_session("five")[2]
    turn.body["system"][0]["cache_control"] = {"type": "ephemeral"}
    turn.body["messages"][2]["content"][-1]["cache_control"] = {"type": "ephemeral"}
    assert len(turn.markers()) == 5
    with caplog.at_level(logging.INFO, logger="switchyard.cache"):
        answer = await stack.send(turn)
    assert answer.status == 200, answer.body[:300]
    sent = stack.model_requests()[-1].json()
    assert len(Turn([], sent).markers()) == 4
    assert "cache_control" not in sent["system"][0]  # the shortest prefix went
    assert "cache_control" in sent["messages"][5]["content"][-1]
    assert any("more than 4 cache breakpoints: dropped system/0" in r.getMessage() for r in caplog.records)


async def test_without_trimming_the_emulator_would_refuse_five(
    stack: CacheStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other half of the test above: the upstream really enforces the limit."""
    from gateway.cache import normalise

    monkeypatch.setattr(normalise, "_limit", lambda result: None)
    turn = claude_code_session("five-untrimmed")[2]
    turn.body["system"][0]["cache_control"] = {"type": "ephemeral"}
    turn.body["messages"][2]["content"][-1]["cache_control"] = {"type": "ephemeral"}
    answer = await stack.send(turn)
    assert answer.status == 400


async def test_auto_cache_places_breakpoints_that_earn_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with cache_stack("anthropic", tmp_path, monkeypatch, GATEWAY_AUTO_CACHE="1") as stack:
        turns = claude_code_session("auto")
        for turn in turns:
            turn.strip_markers()
            turn.body["messages"][0]["content"] = "run echo hi"  # a string, as simple clients send
        answers = [await stack.send(turn) for turn in turns]
        assert [a.status for a in answers] == [200, 200, 200]
        for request in stack.model_requests():
            markers = Turn([], request.json()).markers()
            assert markers == [{"type": "ephemeral"}] * 2
        assert answers[1].read == answers[0].cached > 0
        assert answers[2].read == answers[1].cached
        assert stack.breaks() == {"first_request": 1}


def test_fixture_sessions_are_what_the_tests_assume() -> None:
    turns = claude_code_session("check")
    assert {t.header("X-Claude-Code-Session-Id") for t in turns} == {"check"}
    assert {json.loads(t.body["metadata"]["user_id"])["session_id"] for t in turns} == {"check"}
    assert LATCHED in turns[0].betas
