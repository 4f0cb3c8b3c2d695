"""The normaliser: any history in, a history that satisfies the pairing invariant out."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from loop.messages import MISSING_RESULT_TEXT, normalize, tool_result_block, user_message
from tests.loop.support import pairing_violations


def use(id: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": id, "name": "t", "input": {}}


def result(id: str, text: str = "ok") -> dict[str, Any]:
    return tool_result_block(id, text)


def assistant(*content: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": list(content)}


def user(*content: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "content": list(content)}


TEXT = {"type": "text", "text": "hi"}
MISSING = {"type": "tool_result", "tool_use_id": "b", "content": MISSING_RESULT_TEXT, "is_error": True}


def test_a_valid_history_is_returned_as_it_is() -> None:
    history = [user_message("go"), assistant(TEXT, use("a")), user(result("a"), TEXT), assistant(TEXT)]
    normalized = normalize(history)
    assert normalized == history
    assert all(a is b for a, b in zip(normalized, history, strict=True))


def test_a_missing_result_is_synthesised() -> None:
    history = [user_message("go"), assistant(use("a"), use("b")), user(result("a"))]
    assert normalize(history)[-1] == user(result("a"), MISSING)


def test_a_call_at_the_end_gets_a_results_message() -> None:
    assert normalize([user_message("go"), assistant(use("b"))])[-1] == user(MISSING)


def test_results_are_moved_first_and_into_call_order() -> None:
    history = [assistant(use("a"), use("b")), user(TEXT, result("b"), result("a"))]
    assert normalize(history)[-1] == user(result("a"), result("b"), TEXT)


def test_orphan_and_duplicate_results_are_dropped() -> None:
    history = [
        user(result("ghost"), TEXT),
        assistant(use("a")),
        user(result("a", "first"), result("a", "second"), result("zzz")),
    ]
    assert normalize(history) == [user(TEXT), assistant(use("a")), user(result("a", "first"))]


def test_a_user_message_of_only_orphans_disappears() -> None:
    assert normalize([user_message("go"), assistant(TEXT), user(result("x"))]) == [
        user_message("go"),
        assistant(TEXT),
    ]


def test_results_must_follow_immediately() -> None:
    history = [assistant(use("a")), assistant(TEXT), user(result("a"))]
    fixed = normalize(history)
    assert fixed[1] == user({**MISSING, "tool_use_id": "a"})
    assert pairing_violations(fixed) == []


def test_the_synthesised_text_can_be_chosen() -> None:
    fixed = normalize([assistant(use("a"))], missing_result_text="interrupted")
    assert fixed[-1]["content"][0]["content"] == "interrupted"


def test_string_content_is_left_alone() -> None:
    history = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}]
    assert normalize(history) == history


# --- property: whatever the history, the result is valid, idempotent, and the input untouched ---

IDS = st.sampled_from(["a", "b", "c", "d"])
BLOCK = st.one_of(
    st.just(TEXT),
    IDS.map(use),
    IDS.map(result),
)
MESSAGE = st.builds(
    lambda role, content: {"role": role, "content": content},
    st.sampled_from(["user", "assistant"]),
    st.lists(BLOCK, min_size=0, max_size=4),
)


def _unique_calls(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tool_use ids are unique in a real conversation: rename repeats."""
    seen = 0
    out = []
    for message in history:
        content = []
        for block in message["content"]:
            if block["type"] == "tool_use" and message["role"] == "assistant":
                seen += 1
                block = use(f"{block['id']}{seen}")
            elif block["type"] == "tool_use":
                continue  # tool_use only in assistant messages
            content.append(block)
        if content:
            out.append({**message, "content": content})
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(MESSAGE, max_size=8).map(_unique_calls))
def test_normalize_always_restores_the_invariant(history: list[dict[str, Any]]) -> None:
    before = copy.deepcopy(history)
    fixed = normalize(history)
    assert pairing_violations(fixed) == []
    assert history == before
    assert normalize(fixed) == fixed
