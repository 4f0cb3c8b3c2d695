"""Prefix hashes: what changes them and what must not."""

from __future__ import annotations

import copy
import itertools
from typing import Any

from gateway.cache.prefix import PrefixHashes, prefix_hashes
from tests.support.cache_turns import TOOL_BASH, Turn, marked_blocks

BETAS = ["context-1m-2025-08-07", "interleaved-thinking-2025-05-14"]


def hashes(body: dict[str, Any], betas: list[str] = BETAS) -> PrefixHashes:
    return prefix_hashes(body, betas)


def without_markers(body: dict[str, Any]) -> dict[str, Any]:
    stripped = copy.deepcopy(body)
    for block in marked_blocks(stripped):
        del block["cache_control"]
    return stripped


def test_markers_do_not_change_any_hash() -> None:
    turn = Turn.load("025_cc_firstparty_1h_turn1")
    marked = hashes(turn.body)
    bare = hashes(without_markers(turn.body))
    assert bare.ttls == () and marked.ttls == ("1h", "1h", "1h")
    fields = ("model", "betas", "tools", "system", "messages", "first_message")
    assert [getattr(marked, f) for f in fields] == [getattr(bare, f) for f in fields]
    moved = copy.deepcopy(turn.body)  # a marker moved within the system prompt
    del moved["system"][2]["cache_control"]
    moved["system"][1]["cache_control"] = {"type": "ephemeral"}
    assert [getattr(hashes(moved), f) for f in fields] == [getattr(marked, f) for f in fields]


def test_system_split_follows_the_first_marked_block() -> None:
    turn = Turn.load("025_cc_firstparty_1h_turn1")  # identity (no marker), static (global), dynamic
    before = hashes(turn.body)
    turn.body["system"][3]["text"] += " (today's date changed)"
    after = hashes(turn.body)
    assert after.system_static == before.system_static
    assert after.system_dynamic != before.system_dynamic and after.system != before.system
    turn.body["system"][2]["text"] += " edited"
    assert hashes(turn.body).system_static != before.system_static


def test_the_billing_block_is_left_out() -> None:
    turn = Turn.load("025_cc_firstparty_1h_turn1")
    before = hashes(turn.body)
    turn.body["system"][0]["text"] = turn.body["system"][0]["text"].replace("cch=70e58", "cch=b67de")
    assert hashes(turn.body) == before
    del turn.body["system"][0]
    assert hashes(turn.body) == before


def test_a_billing_lookalike_further_down_is_part_of_the_prefix() -> None:
    turn = Turn.load("025_cc_firstparty_1h_turn1")
    before = hashes(turn.body)
    turn.body["system"].insert(2, {"type": "text", "text": "x-anthropic-billing-header: pasted by the user"})
    assert hashes(turn.body).system_static != before.system_static


def test_moving_the_message_breakpoint_keeps_the_history_hashes() -> None:
    """Claude Code moves the message breakpoint to the newest block every turn (README 1.5)."""
    turns = [hashes(Turn.load(name).body) for name in TOOL_BASH]
    for previous, current in itertools.pairwise(turns):
        assert current.messages[: len(previous.messages)] == previous.messages
        assert len(current.messages) == len(previous.messages) + 2
        assert (current.tools, current.system, current.system_static, current.first_message) == (
            previous.tools,
            previous.system,
            previous.system_static,
            previous.first_message,
        )
        assert current.ttls == previous.ttls == ("5m", "5m", "5m")


def test_each_segment_has_its_own_hash() -> None:
    base = Turn.load("016_cc_tool_bash_turn2").body
    reference = hashes(base)
    assert hashes(base, [*BETAS, "effort-2025-11-24"]).betas != reference.betas
    assert hashes(base, list(reversed(BETAS))).betas == reference.betas  # a set: order is irrelevant
    assert hashes(base, [*BETAS, *BETAS]).betas == reference.betas

    model = copy.deepcopy(base)
    model["model"] = "claude-opus-4-7"
    assert hashes(model).model == "claude-opus-4-7" != reference.model

    tools = copy.deepcopy(base)
    tools["tools"][0]["description"] += "!"
    assert hashes(tools).tools != reference.tools

    edited = copy.deepcopy(base)
    edited["messages"][2]["content"][0]["text"] += "!"
    changed = hashes(edited)
    assert changed.messages[:2] == reference.messages[:2]
    assert changed.messages[2] != reference.messages[2] and changed.messages[3] != reference.messages[3]
    assert changed.first_message == reference.first_message


def test_string_content_hashes_like_the_text_block_it_stands_for() -> None:
    """The automatic breakpoint turns the last user message's string into a marked text block;
    on the next turn the client sends the string again: same prefix for the API, same hash."""
    as_string = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "system": "s"}
    as_block = {
        "model": "m",
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}],
            }
        ],
        "system": [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}],
    }
    a, b = hashes(as_string), hashes(as_block)
    assert (a.messages, a.first_message, a.system) == (b.messages, b.first_message, b.system)


def test_json_round_trip_and_summary() -> None:
    original = hashes(Turn.load("017_cc_tool_bash_turn3").body)
    assert PrefixHashes.from_json(original.to_json()) == original
    summary = original.summary()
    assert summary["messages"] == 6 and summary["history"] == original.messages[-1]
    assert summary["ttls"] == ["5m", "5m", "5m"]
