"""cache_control normalisation per upstream (gateway.cache.normalise), rule by rule."""

from __future__ import annotations

import copy
import logging
from typing import Any

import orjson
import pytest

from gateway.cache.breakpoints import locate_breakpoints
from gateway.cache.latches import Latches
from gateway.cache.normalise import CacheRules, normalise
from tests.support.cache_turns import TOOL_BASH, Turn, marked_blocks

FIRST_PARTY = CacheRules("anthropic", normalise_billing_header=False, auto_cache=False)
BEDROCK = CacheRules("bedrock", normalise_billing_header=True, auto_cache=False)
VERTEX = CacheRules("vertex", normalise_billing_header=True, auto_cache=False)
FOUNDRY = CacheRules("foundry", normalise_billing_header=False, auto_cache=False)
NO_SESSION = Latches()
EPHEMERAL = {"type": "ephemeral"}
ONE_HOUR = {"type": "ephemeral", "ttl": "1h"}


def text(value: str, control: dict[str, Any] | None = None) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "text", "text": value}
    if control is not None:
        block["cache_control"] = dict(control)
    return block


def request(*controls: dict[str, Any] | None, top: dict[str, Any] | None = None) -> dict[str, Any]:
    """A body whose system blocks carry ``controls`` (``None``: no marker), then one user turn."""
    body: dict[str, Any] = {
        "model": "claude-opus-4-8",
        "max_tokens": 16,
        "system": [text(f"block {i}", c) for i, c in enumerate(controls)],
        "messages": [{"role": "user", "content": [text("hello")]}],
    }
    if top is not None:
        body["cache_control"] = top
    return body


def ttls(body: dict[str, Any]) -> list[str]:
    return [b.ttl for b in locate_breakpoints(body)]


# -- 1. billing header --------------------------------------------------------------------------


@pytest.mark.parametrize(("rules", "pinned"), [(BEDROCK, True), (VERTEX, True), (FIRST_PARTY, False)])
def test_billing_header_cch_is_pinned_only_for_configured_providers(rules: CacheRules, pinned: bool) -> None:
    turn = Turn.load("025_cc_firstparty_1h_turn1")
    original = turn.body["system"][0]["text"]
    assert "cch=70e58;" in original
    result = normalise(turn.body, rules, NO_SESSION)
    first = result.payload["system"][0]["text"]
    if pinned:
        assert first == original.replace("cch=70e58;", "cch=00000;")
        assert "billing header cch pinned" in result.notes
    else:
        assert first == original
        assert "billing header cch pinned" not in result.notes
    assert turn.body["system"][0]["text"] == original  # the client's body is never modified


def test_billing_header_already_pinned_or_without_cch_is_left_alone() -> None:
    vertex = Turn.load("050_cc_vertex_turn1")  # Claude Code on Vertex sends cch=00000 itself
    assert not normalise(vertex.body, VERTEX, NO_SESSION).changed
    bedrock = Turn.load("047_cc_bedrock_turn1")  # on Bedrock it sends no cch at all
    assert not normalise(bedrock.body, BEDROCK, NO_SESSION).changed


def test_only_the_leading_system_block_is_a_billing_header() -> None:
    body = request(None, EPHEMERAL)
    body["system"][1]["text"] = "x-anthropic-billing-header: cch=12345; quoted by a user"
    assert not normalise(body, BEDROCK, NO_SESSION).changed


# -- 2. scope -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rules", "latches", "kept"),
    [
        (FIRST_PARTY, NO_SESSION, True),
        (FIRST_PARTY, Latches(global_scope=True), True),
        (FIRST_PARTY, Latches(global_scope=False), False),  # the session started without it
        (BEDROCK, NO_SESSION, False),
        (VERTEX, Latches(global_scope=True), False),
        (FOUNDRY, NO_SESSION, False),
    ],
)
def test_global_scope_only_reaches_the_first_party_api(
    rules: CacheRules, latches: Latches, kept: bool
) -> None:
    turn = Turn.load("025_cc_firstparty_1h_turn1")
    result = normalise(turn.body, rules, latches)
    scopes = [m.get("scope") for m in (b["cache_control"] for b in marked_blocks(result.payload))]
    assert ("global" in scopes) is kept
    assert ("scope removed" in result.notes) is not kept
    if not kept:  # only the scope went: ttl and key order stay
        assert [b["cache_control"] for b in marked_blocks(result.payload)] == [ONE_HOUR, ONE_HOUR, ONE_HOUR]


# -- 3. ttl -------------------------------------------------------------------------------------


def test_ttl_latch_on_gives_every_breakpoint_the_hour() -> None:
    result = normalise(
        request(EPHEMERAL, {"type": "ephemeral", "scope": "global"}), FIRST_PARTY, Latches(ttl_1h=True)
    )
    assert [b["cache_control"] for b in marked_blocks(result.payload)] == [
        ONE_HOUR,
        {"type": "ephemeral", "ttl": "1h", "scope": "global"},  # the key order clients use
    ]
    assert list(orjson.loads(orjson.dumps(result.payload))["system"][1]["cache_control"]) == [
        "type",
        "ttl",
        "scope",
    ]


def test_ttl_latch_off_brings_the_hour_back_to_five_minutes() -> None:
    result = normalise(request(ONE_HOUR, ONE_HOUR), FIRST_PARTY, Latches(ttl_1h=False))
    assert [b["cache_control"] for b in marked_blocks(result.payload)] == [EPHEMERAL, EPHEMERAL]
    assert result.changed


def test_no_ttl_latch_leaves_ttls_as_sent() -> None:
    body = request(ONE_HOUR, EPHEMERAL)
    result = normalise(body, FIRST_PARTY, NO_SESSION)
    assert not result.changed and result.payload == body


def test_a_5m_breakpoint_before_a_1h_one_is_upgraded() -> None:
    result = normalise(request(EPHEMERAL, None, ONE_HOUR, EPHEMERAL), FIRST_PARTY, NO_SESSION)
    assert ttls(result.payload) == ["1h", "1h", "5m"]
    assert "5m breakpoint before a 1h one upgraded" in result.notes


def test_the_automatic_breakpoint_counts_for_the_ttl_order_and_latch() -> None:
    """The top-level cache_control marks the last block: a 1h one after a 5m block is the API's 400."""
    upgraded = normalise(request(EPHEMERAL, top=ONE_HOUR), FIRST_PARTY, NO_SESSION)
    assert upgraded.payload["system"][0]["cache_control"] == ONE_HOUR
    latched_off = normalise(request(EPHEMERAL, top=ONE_HOUR), FIRST_PARTY, Latches(ttl_1h=False))
    assert latched_off.payload["cache_control"] == EPHEMERAL
    assert ttls(latched_off.payload) == ["5m", "5m"]
    latched_on = normalise(request(None, top=EPHEMERAL), FIRST_PARTY, Latches(ttl_1h=True))
    assert latched_on.payload["cache_control"] == ONE_HOUR


# -- 4. at most four breakpoints -----------------------------------------------------------------


def test_more_than_four_breakpoints_keep_the_longest_prefixes(caplog: pytest.LogCaptureFixture) -> None:
    body = request(EPHEMERAL, EPHEMERAL, EPHEMERAL, EPHEMERAL)
    body["messages"][0]["content"] = [text("a", EPHEMERAL), text("b", EPHEMERAL)]
    with caplog.at_level(logging.INFO, logger="switchyard.cache"):
        result = normalise(body, FIRST_PARTY, NO_SESSION)
    kept = [b.path for b in locate_breakpoints(result.payload)]
    assert kept == [
        ("system", 2),
        ("system", 3),
        ("messages", 0, "content", 0),
        ("messages", 0, "content", 1),
    ]
    assert result.notes == ["dropped breakpoints: system/0, system/1"]
    assert any("more than 4 cache breakpoints" in r.getMessage() for r in caplog.records)
    assert len(locate_breakpoints(body)) == 6  # the client's body is untouched


def test_trimming_keeps_a_global_scope_breakpoint_first() -> None:
    glob = {"type": "ephemeral", "scope": "global"}
    body = request(glob, EPHEMERAL, EPHEMERAL, EPHEMERAL, EPHEMERAL)
    result = normalise(body, FIRST_PARTY, NO_SESSION)
    assert [b.path for b in locate_breakpoints(result.payload)] == [
        ("system", 0),
        ("system", 2),
        ("system", 3),
        ("system", 4),
    ]


# -- 5. automatic breakpoints --------------------------------------------------------------------

AUTO = CacheRules("anthropic", normalise_billing_header=False, auto_cache=True)


def test_auto_cache_places_two_breakpoints_within_the_limit() -> None:
    body = request(None, None)
    body["tools"] = [{"name": "t", "description": "d", "input_schema": {"type": "object"}}]
    body["messages"] = [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": [text("second"), text("third")]},
    ]
    result = normalise(body, AUTO, NO_SESSION)
    assert [b.path for b in locate_breakpoints(result.payload)] == [
        ("system", 1),
        ("messages", 2, "content", 1),
    ]
    assert "automatic breakpoints placed" in result.notes
    assert "cache_control" not in result.payload["tools"][0]


def test_auto_cache_turns_strings_into_marked_blocks() -> None:
    body = {
        "model": "m",
        "max_tokens": 1,
        "system": "be brief",
        "messages": [{"role": "user", "content": "hi"}],
    }
    result = normalise(body, AUTO, NO_SESSION)
    assert result.payload["system"] == [text("be brief", EPHEMERAL)]
    assert result.payload["messages"] == [{"role": "user", "content": [text("hi", EPHEMERAL)]}]


def test_auto_cache_marks_the_last_tool_without_a_system_prompt() -> None:
    body = {
        "model": "m",
        "max_tokens": 1,
        "tools": [{"name": "a", "input_schema": {}}, {"name": "b", "input_schema": {}}],
        "messages": [{"role": "user", "content": [text("hi")]}],
    }
    result = normalise(body, AUTO, NO_SESSION)
    assert [b.path for b in locate_breakpoints(result.payload)] == [
        ("tools", 1),
        ("messages", 0, "content", 0),
    ]


@pytest.mark.parametrize("marker", ["block", "top"])
def test_auto_cache_leaves_a_request_with_breakpoints_alone(marker: str) -> None:
    body = request(EPHEMERAL, None) if marker == "block" else request(None, top=EPHEMERAL)
    result = normalise(body, AUTO, NO_SESSION)
    assert not result.changed and result.payload == body


def test_auto_cache_is_off_by_default() -> None:
    body = request(None)
    assert not normalise(body, FIRST_PARTY, NO_SESSION).changed


# -- an untouched body ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", [*TOOL_BASH, "025_cc_firstparty_1h_turn1", "074_cc_interactive_title_generation"]
)
def test_a_body_no_rule_applies_to_is_untouched(name: str) -> None:
    turn = Turn.load(name)
    before = copy.deepcopy(turn.body)
    result = normalise(
        turn.body, FIRST_PARTY, Latches(ttl_1h="ttl" in str(turn.markers()), global_scope=True)
    )
    assert not result.changed
    assert result.notes == []
    assert result.payload == before == turn.body


def tool_result(control: dict[str, Any] | None, *nested: dict[str, Any]) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": "t1", "content": list(nested)}
    if control is not None:
        block["cache_control"] = dict(control)
    return block


def test_a_block_and_its_marked_content_agree_on_the_ttl() -> None:
    """Nested markers come before their block in prefix order, but an upstream may check the TTL
    order block first: a 5m tool_result around 1h content is upgraded so both orders hold."""
    body = request(None)
    body["messages"][0]["content"] = [tool_result(EPHEMERAL, text("a", ONE_HOUR), text("b", EPHEMERAL))]
    result = normalise(body, FIRST_PARTY, NO_SESSION)
    assert ttls(result.payload) == ["1h", "1h", "1h"]
    assert result.notes == ["5m breakpoint before a 1h one upgraded"]


def test_markers_nested_deeper_are_normalised_too() -> None:
    glob = {"type": "ephemeral", "ttl": "1h", "scope": "global"}
    search = {"type": "search_result", "source": "s", "title": "t", "content": [text("found", glob)]}
    body = request(None)
    body["messages"][0]["content"] = [tool_result(None, search)]
    result = normalise(body, BEDROCK, Latches(ttl_1h=False))
    assert (
        result.payload["messages"][0]["content"][0]["content"][0]["content"][0]["cache_control"] == EPHEMERAL
    )
