"""Cache-break detection end to end, on each of the four upstreams: the Claude Code captures
replayed turn after turn keep a byte-identical prefix at the upstream and read what the previous
turn wrote; then each kind of change is injected and named."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cache_stack import Answer, CacheStack, cache_stack, upstream_betas
from tests.support.cache_turns import Turn, claude_code_session, ordered_bytes, strip_markers

PROVIDERS = ["anthropic", "bedrock", "vertex", "foundry"]
TOGGLED = "interleaved-thinking-2025-05-14"  # latchable, and offered by every upstream


@pytest.fixture(params=PROVIDERS)
async def stack(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[CacheStack]:
    async with cache_stack(request.param, tmp_path, monkeypatch) as built:
        yield built


def session(stack: CacheStack, session_id: str) -> list[Turn]:
    # the first-party capture as it is, role "system" messages included: Bedrock and Vertex take
    # them without the mid-conversation-system beta, which the gateway drops there (providers.md s7)
    return claude_code_session(session_id)


def assert_prefix_kept(bodies: list[dict[str, Any]], raw: list[bytes]) -> None:
    """Turn N+1 starts with the bytes of turn N: tools and system verbatim (their markers do not
    move), every earlier message verbatim but for the marker the client moved."""
    for (previous, current), current_raw in zip(itertools.pairwise(bodies), raw[1:], strict=True):
        for section in ("tools", "system"):
            assert ordered_bytes(current[section]) == ordered_bytes(previous[section]), section
            assert ordered_bytes(previous[section]) in current_raw, f"{section}: not a raw slice"
        history = len(previous["messages"])
        assert len(current["messages"]) > history
        assert ordered_bytes(strip_markers(current["messages"][:history])) == ordered_bytes(
            strip_markers(previous["messages"])
        )


async def test_replayed_turns_keep_the_prefix_and_read_what_the_last_turn_wrote(stack: CacheStack) -> None:
    answers = [await stack.send(turn) for turn in session(stack, "replay")]
    assert [a.status for a in answers] == [200, 200, 200], [a.body[:200] for a in answers]
    upstream = stack.model_requests()
    assert len(upstream) == 3
    assert_prefix_kept([r.json() for r in upstream], [r.body for r in upstream])
    assert answers[0].read == 0 < answers[0].cached
    for previous, current in itertools.pairwise(answers):
        assert current.read == previous.cached
    assert stack.breaks() == {"first_request": 1}


async def send_ok(stack: CacheStack, turn: Turn) -> Answer:
    answer = await stack.send(turn)
    assert answer.status == 200, answer.body[:300]
    return answer


async def test_injected_changes_are_named(stack: CacheStack) -> None:
    first, second, third = session(stack, "breaks")

    # turn 1, then the client stops sending a latched beta: still sent, no break
    one = await send_ok(stack, first)
    two = await send_ok(stack, second.without_betas(TOGGLED))
    three = await send_ok(stack, third.without_betas(TOGGLED))
    assert all(TOGGLED in upstream_betas(r) for r in stack.model_requests())
    assert (two.read, three.read) == (one.cached, two.cached)
    assert stack.breaks() == {"first_request": 1}

    # the system prompt changes: what precedes it (tools, identity block) is still read
    system = third.copy().without_betas(TOGGLED)
    system.body["system"][2]["text"] += "\nAlways answer in French."
    changed = await send_ok(stack, system)
    assert 0 < changed.read < three.cached
    assert stack.breaks() == {"first_request": 1, "system_changed": 1}

    # another model: nothing of the old model's cache applies
    model = system.copy()
    model.body["model"] = "claude-opus-4-7"
    switched = await send_ok(stack, model)
    assert switched.read == 0
    assert stack.breaks()["model_changed"] == 1

    # an earlier assistant message edited: tools and system are still read
    edited = model.copy()
    assistant = next(m for m in edited.body["messages"] if m["role"] == "assistant")
    assistant["content"][0]["text"] = "Let me think about that differently."
    rewritten = await send_ok(stack, edited)
    assert 0 < rewritten.read < switched.cached
    assert stack.breaks()["messages_edited"] == 1

    # past the 5-minute TTL (on the emulator's clock and the gateway's): the same request misses
    stack.advance(301)
    expired = await send_ok(stack, edited)
    assert expired.read == 0
    assert stack.breaks()["ttl_expired"] == 1
    again = await send_ok(stack, edited)  # and then reads what it rewrote
    assert again.read == expired.cached

    assert stack.breaks() == {
        "first_request": 1,
        "system_changed": 1,
        "model_changed": 1,
        "messages_edited": 1,
        "ttl_expired": 1,
    }
    assert all(TOGGLED in upstream_betas(r) for r in stack.model_requests())
    status, view = await stack.session("breaks")
    assert status == 200
    assert [b["reason"] for b in view["recent_breaks"]] == [
        "first_request",
        "system_changed",
        "model_changed",
        "messages_edited",
        "ttl_expired",
    ]
    assert view["recent_breaks"][1]["expected"] == three.cached
    assert view["recent_breaks"][1]["cache_read_input_tokens"] == changed.read
    assert TOGGLED in view["latches"]["betas"]
    assert view["last_request"]["prefix"]["model"] == "claude-opus-4-7"
    assert view["last_request"]["cached_tokens"] == again.cached


async def test_first_party_1h_capture_on_each_upstream(stack: CacheStack) -> None:
    """Claude Code's first-party variant (1h TTL, global scope, a per-request cch): the scope only
    reaches the first-party API, the cch is pinned where the upstream caches the billing block, and
    turn 2 reads what turn 1 wrote."""
    turns = [Turn.load("025_cc_firstparty_1h_turn1"), Turn.load("026_cc_firstparty_1h_turn2")]
    answers = [await send_ok(stack, t) for t in turns]
    assert answers[1].read == answers[0].cached > 0
    bodies = [r.json() for r in stack.model_requests()]
    billing = [b["system"][0]["text"] for b in bodies]
    scopes = {m.get("scope") for b in bodies for m in Turn([], b).markers()}
    ttls = {m.get("ttl") for b in bodies for m in Turn([], b).markers()}
    assert ttls == {"1h"}
    if stack.provider in ("bedrock", "vertex"):
        assert all("cch=00000;" in text for text in billing)
        assert_prefix_kept(bodies, [r.body for r in stack.model_requests()])  # the system too
    else:
        assert [t.body["system"][0]["text"] for t in turns] == billing
    assert scopes == ({"global", None} if stack.provider == "anthropic" else {None})
    assert stack.breaks() == {"first_request": 1}


def as_first_party(name: str) -> Turn:
    """A Bedrock or Vertex capture as the same client would send it to the gateway: the model
    (``claude-sonnet-4-5@20250929`` or ``us.anthropic.claude-sonnet-4-5-20250929-v1:0`` in the
    capture's path) in the body, Bedrock's body betas in the header, no ``anthropic_version``."""
    turn = Turn.load(name)
    assert "claude-sonnet-4-5" in turn.path and "20250929" in turn.path
    body_betas = turn.body.pop("anthropic_beta", [])
    turn.body.pop("anthropic_version")
    turn.body = {"model": "claude-sonnet-4-5-20250929", **turn.body, "stream": True}
    if body_betas:
        turn.set_header("anthropic-beta", ",".join([*turn.betas, *body_betas]))
    turn.path = "/v1/messages?beta=true"
    return turn


@pytest.mark.parametrize(
    ("provider", "names"),
    [
        ("bedrock", ["047_cc_bedrock_turn1", "048_cc_bedrock_turn2"]),
        ("vertex", ["050_cc_vertex_turn1", "051_cc_vertex_turn2"]),
    ],
)
async def test_cloud_captures_through_their_upstream(
    provider: str, names: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with cache_stack(provider, tmp_path, monkeypatch) as stack:
        turns = [as_first_party(n) for n in names]
        answers = [await send_ok(stack, t) for t in turns]
        assert answers[1].read == answers[0].cached > 0
        upstream = stack.model_requests()
        assert_prefix_kept([r.json() for r in upstream], [r.body for r in upstream])
        assert stack.breaks() == {"first_request": 1}


async def test_a_turn_served_by_the_fallback_model_is_a_model_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two 529s on the session's model send turn 3 to the fallback model, whose cache holds none
    of the prefix; turn 4 is back on the first model. Both reads fall short because the serving
    model changed: ``model_changed`` twice (the break was ``unknown``, the hashes being those of
    the model the client asked for)."""
    async with cache_stack(
        "anthropic",
        tmp_path,
        monkeypatch,
        GATEWAY_MAX_RETRIES="3",
        GATEWAY_CLIENT_RETRYING_MAX_RETRIES="3",
        GATEWAY_FALLBACK_MODEL="claude-sonnet-4-5",
        GATEWAY_FALLBACK_AFTER_OVERLOADS="2",
    ) as stack:
        first, second, third = claude_code_session("fallback")
        one, two = await stack.send(first), await stack.send(second)
        assert (one.status, two.status) == (200, 200) and two.read == one.cached
        overloaded = third.copy()
        overloaded.set_header("x-emulator-fault", "model=claude-opus-4-8,fail_first=2:529,retry_after_ms=1")
        three = await stack.send(overloaded)
        assert three.headers.get("x-gateway-model-fallback") == "claude-sonnet-4-5"
        assert three.read < two.cached  # the fallback model's cache held none of it
        four = await stack.send(third.copy())
        assert four.status == 200 and not four.headers.get("x-gateway-model-fallback")
        assert stack.breaks() == {"first_request": 1, "model_changed": 2}


@pytest.mark.parametrize("provider", ["anthropic", "bedrock"])
async def test_two_conversations_in_one_session_are_compared_each_with_its_own(
    provider: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Claude Code's side calls and sub-agents carry the main conversation's session id (captures
    074/075 share one) with their own system prompt and tools. Interleaved, each conversation's
    turn reads all its own last turn cached: no break; the side conversation's first turn is its
    own first request (it was compared with the main conversation's and called a break)."""
    async with cache_stack(provider, tmp_path, monkeypatch) as stack:
        main_1, main_2, main_3 = claude_code_session("both")
        side_1 = Turn.load("075_cc_interactive_turn1").with_session("both")
        side_2 = side_1.copy()
        del side_2.body["messages"][0]["content"][-1]["cache_control"]
        side_2.body["messages"] += [
            {"role": "assistant", "content": [{"type": "text", "text": "Echo: ok"}]},
            {"role": "user", "content": [{"type": "text", "text": "and then?", "cache_control": {"type": "ephemeral"}}]},
        ]
        answers: dict[str, list[Answer]] = {"main": [], "side": []}
        for name, turn in (("main", main_1), ("side", side_1), ("main", main_2), ("side", side_2), ("main", main_3)):
            answer = await stack.send(turn)
            assert answer.status == 200, answer.body[:300]
            answers[name].append(answer)
        for turns in answers.values():  # the upstream: no cache broke
            for before, after in itertools.pairwise(turns):
                assert after.read == before.cached
        firsts = sum(1 for turns in answers.values() if turns[0].read == 0)
        assert stack.breaks() == {"first_request": firsts}
        status, view = await stack.session("both")
        assert (status == 200 and view["recent_breaks"] == []) or all(
            b["reason"] == "first_request" for b in view["recent_breaks"]
        )
