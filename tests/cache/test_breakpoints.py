"""Counting breakpoints across tools/system/messages and trimming them to the API's limit of 4."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.cache.breakpoints import (
    MAX_CACHE_BREAKPOINTS,
    count_breakpoints,
    locate_breakpoints,
    trim_breakpoints,
)

EPH = {"type": "ephemeral"}
EPH_1H = {"type": "ephemeral", "ttl": "1h"}
GLOBAL = {"type": "ephemeral", "ttl": "1h", "scope": "global"}


def _text(text: str, control: dict[str, str] | None = None) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "text", "text": text}
    if control is not None:
        block["cache_control"] = dict(control)
    return block


def claude_code_body(extra_message_markers: int = 0) -> dict[str, Any]:
    """The first-party layout of the captured traffic (3 markers), plus older message markers."""
    messages: list[dict[str, Any]] = []
    for turn in range(extra_message_markers + 1):
        messages.append({"role": "user", "content": [_text(f"prompt {turn}", EPH_1H)]})
        messages.append({"role": "assistant", "content": [_text(f"answer {turn}")]})
    messages.pop()
    return {
        "model": "claude-opus-4-8",
        "tools": [{"name": "Bash", "input_schema": {"type": "object"}}],
        "system": [
            _text("x-anthropic-billing-header: cc_version=2.1.197"),
            _text("static", GLOBAL),
            _text("dynamic", EPH_1H),
        ],
        "messages": messages,
    }


def test_counts_markers_everywhere() -> None:
    body = claude_code_body()
    assert count_breakpoints(body) == 3
    body["tools"][0]["cache_control"] = dict(EPH_1H)
    body["messages"].append(
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t1",
                    "content": [_text("out", EPH)],
                    "cache_control": EPH,
                }
            ],
        }
    )
    assert count_breakpoints(body) == 6
    paths = [b.path for b in locate_breakpoints(body)]
    assert paths == [
        ("tools", 0),
        ("system", 1),
        ("system", 2),
        ("messages", 0, "content", 0),
        ("messages", 1, "content", 0, "content", 0),
        ("messages", 1, "content", 0),
    ]


def test_ignores_what_is_not_a_marker() -> None:
    body = {
        "system": "plain string system",
        "messages": [{"role": "user", "content": "plain string"}, {"role": "user", "content": [_text("x")]}],
        "tools": [{"name": "t", "cache_control": None}],
    }
    assert count_breakpoints(body) == 0
    assert count_breakpoints({}) == 0


def test_top_level_automatic_marker_takes_a_slot_unless_the_last_block_has_one() -> None:
    body = claude_code_body()
    body["cache_control"] = dict(EPH)
    assert count_breakpoints(body) == 3  # the last block is already marked
    body["messages"].append({"role": "assistant", "content": [_text("unmarked")]})
    assert count_breakpoints(body) == 4
    assert locate_breakpoints(body)[-1].path == ()
    assert count_breakpoints({"cache_control": EPH}) == 0  # nothing to mark
    assert count_breakpoints({"cache_control": EPH, "system": "s"}) == 1


def test_trim_keeps_the_global_marker_and_the_longest_prefixes() -> None:
    body = claude_code_body(extra_message_markers=3)  # 2 system + 4 message markers
    body["tools"][0]["cache_control"] = dict(EPH_1H)  # 7 in all
    original = copy.deepcopy(body)
    result = trim_breakpoints(body)
    assert body == original  # never modified
    assert count_breakpoints(result.body) == MAX_CACHE_BREAKPOINTS
    assert [b.path for b in result.kept] == [
        ("system", 1),  # global scope: kept although its prefix is short
        ("messages", 2, "content", 0),
        ("messages", 4, "content", 0),
        ("messages", 6, "content", 0),
    ]
    assert [b.path for b in result.dropped] == [("tools", 0), ("system", 2), ("messages", 0, "content", 0)]
    assert result.body["messages"][0]["content"][0] == {"type": "text", "text": "prompt 0"}
    assert result.body["messages"][1] is body["messages"][1]  # untouched parts are shared


def test_trim_without_global_markers_keeps_the_last_four() -> None:
    body = claude_code_body(extra_message_markers=2)
    body["system"][1]["cache_control"] = dict(EPH_1H)
    result = trim_breakpoints(body)
    assert [b.path for b in result.dropped] == [("system", 1)]
    assert trim_breakpoints(body, limit=1).kept == (locate_breakpoints(body)[-1],)


def test_trim_can_drop_the_automatic_marker() -> None:
    system = [*(_text(f"s{i}", GLOBAL) for i in range(4)), _text("unmarked")]
    body = {"system": system, "messages": [], "cache_control": EPH}
    assert count_breakpoints(body) == 5
    result = trim_breakpoints(body)
    assert "cache_control" not in result.body
    assert "cache_control" in body
    assert [b.path for b in result.dropped] == [()]


def test_trim_below_the_limit_changes_nothing() -> None:
    body = claude_code_body()
    result = trim_breakpoints(body)
    assert result.body == body
    assert result.dropped == ()
    assert len(result.kept) == 3


@dataclass
class Built:
    body: dict[str, Any]
    markers: list[tuple[str, bool]] = field(default_factory=list)
    """(label, global) of every counted marker, in the prefix order the builder intended."""


MARKERS = st.sampled_from([EPH, EPH_1H, GLOBAL, {"type": "ephemeral", "scope": "global"}])


@st.composite
def requests(draw: st.DrawFn) -> Built:
    """Requests with 0-8 breakpoints on tools, system, message and nested tool_result blocks."""
    budget = draw(st.integers(0, 8))
    built = Built({})
    counter = iter(range(10_000))

    def block(kind: str) -> dict[str, Any]:
        label = f"{kind}{next(counter)}"
        item: dict[str, Any] = {"name": label} if kind == "tool" else _text(label)
        nonlocal budget
        if budget and draw(st.booleans()):
            control = draw(MARKERS)
            item["cache_control"] = dict(control)
            built.markers.append((label, control.get("scope") == "global"))
            budget -= 1
        return item

    if draw(st.booleans()):
        built.body["tools"] = [block("tool") for _ in range(draw(st.integers(0, 3)))]
    built.body["system"] = [block("sys") for _ in range(draw(st.integers(0, 3)))]
    messages = []
    for _ in range(draw(st.integers(0, 4))):
        content = []
        for _ in range(draw(st.integers(1, 3))):
            if draw(st.booleans()):
                nested = [block("inner") for _ in range(draw(st.integers(0, 2)))]
                result = block("result")  # after its nested blocks: prefix order
                result.update({"type": "tool_result", "tool_use_id": "t", "content": nested})
                content.append(result)
            else:
                content.append(block("msg"))
        messages.append({"role": "user", "content": content})
    built.body["messages"] = messages
    if budget and draw(st.booleans()):
        built.body["cache_control"] = dict(EPH)
        last = _last_block(built.body)
        if last is not None and not _has_marker(last):  # on the last block or one nested in it
            built.markers.append(("auto", False))
    return built


def _last_block(body: dict[str, Any]) -> dict[str, Any] | None:
    for key in ("messages", "system", "tools"):
        items = body.get(key) or []
        if items:
            last: dict[str, Any] = items[-1]["content"][-1] if key == "messages" else items[-1]
            return last
    return None


def _has_marker(node: Any) -> bool:
    if isinstance(node, dict):
        return isinstance(node.get("cache_control"), dict) or any(_has_marker(v) for v in node.values())
    return isinstance(node, list) and any(_has_marker(v) for v in node)


def _marked_labels(body: dict[str, Any]) -> set[str]:
    labels: set[str] = set()

    def visit(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("cache_control"), dict) and ("text" in node or "name" in node):
                labels.add(str(node.get("text") or node.get("name")))
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    visit({k: v for k, v in body.items() if k != "cache_control"})
    if "cache_control" in body:
        labels.add("auto")
    return labels


def _without_markers(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _without_markers(v) for k, v in node.items() if k != "cache_control"}
    if isinstance(node, list):
        return [_without_markers(v) for v in node]
    return node


@settings(max_examples=300, deadline=None)
@given(requests())
def test_trim_property(built: Built) -> None:
    body = built.body
    original = copy.deepcopy(body)
    assert count_breakpoints(body) == len(built.markers)

    result = trim_breakpoints(body)
    assert body == original
    assert count_breakpoints(result.body) == min(len(built.markers), MAX_CACHE_BREAKPOINTS)
    assert _without_markers(result.body) == _without_markers(body)

    # The documented rule: global-scope markers first, then the furthest along the prefix order.
    ranked = sorted(enumerate(built.markers), key=lambda m: (m[1][1], m[0]), reverse=True)
    expected = {label for _, (label, _) in ranked[:MAX_CACHE_BREAKPOINTS]}
    labels_before = _marked_labels(body)
    free = labels_before - {m for m, _ in built.markers}  # the top-level marker, when it took no slot
    last = _last_block(body)
    if "auto" in free and last is not None and not (_marked_labels({"x": [last]}) & expected):
        # the last block's own marker was dropped: the top-level marker would now take a fifth
        # slot of its own, so it goes too
        free.discard("auto")
    assert _marked_labels(result.body) == expected | free
    if not any(is_global for _, is_global in built.markers):
        assert {m for m, _ in built.markers[-MAX_CACHE_BREAKPOINTS:]} <= _marked_labels(result.body)
