"""Sticky latches: what a request would latch, and how latched betas rejoin the client's."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.cache.latches import DEFAULT_LATCHED_BETAS, Latches, merged_betas, observe
from tests.support.cache_turns import Turn

EPHEMERAL = {"type": "ephemeral"}
ONE_HOUR = {"type": "ephemeral", "ttl": "1h"}
GLOBAL = {"type": "ephemeral", "ttl": "1h", "scope": "global"}


def body(*, system: Any = None, messages: Any = None, **top: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "model": "claude-opus-4-8",
        "max_tokens": 10,
        "messages": messages or [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
    }
    if system is not None:
        payload["system"] = system
    payload.update(top)
    return payload


def test_only_latchable_betas_are_observed() -> None:
    observed = observe(
        body(), ["claude-code-20250219", "context-1m-2025-08-07", "my-beta-1"], DEFAULT_LATCHED_BETAS
    )
    assert observed.betas == {"context-1m-2025-08-07"}
    configured = observe(body(), ["my-beta-1"], DEFAULT_LATCHED_BETAS | {"my-beta-1"})
    assert configured.betas == {"my-beta-1"}


@pytest.mark.parametrize(
    ("system", "messages", "top", "ttl_1h", "global_scope"),
    [
        ([{"type": "text", "text": "s", "cache_control": EPHEMERAL}], None, None, False, False),
        ([{"type": "text", "text": "s", "cache_control": ONE_HOUR}], None, None, True, False),
        ([{"type": "text", "text": "s", "cache_control": GLOBAL}], None, None, True, True),
        # a breakpoint nested in tool_result content counts like any other
        (
            None,
            [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "t1",
                            "content": [{"type": "text", "text": "out", "cache_control": ONE_HOUR}],
                        }
                    ],
                }
            ],
            None,
            True,
            False,
        ),
        # the automatic (top-level) breakpoint too
        (None, None, ONE_HOUR, True, False),
        (None, None, EPHEMERAL, False, False),
    ],
)
def test_eligibilities_come_from_the_breakpoints(
    system: Any, messages: Any, top: Any, ttl_1h: bool, global_scope: bool
) -> None:
    extra = {} if top is None else {"cache_control": top}
    observed = observe(body(system=system, messages=messages, **extra), [], DEFAULT_LATCHED_BETAS)
    assert (observed.ttl_1h, observed.global_scope) == (ttl_1h, global_scope)


def test_a_request_without_breakpoints_decides_nothing() -> None:
    """Claude Code's title-generation side call carries no cache_control at all and shares the
    session id: it must not latch the session's 1h TTL and global scope off."""
    title = Turn.load("074_cc_interactive_title_generation")
    assert not title.markers()
    observed = observe(title.body, title.betas, DEFAULT_LATCHED_BETAS)
    assert observed.ttl_1h is None and observed.global_scope is None
    assert "context-1m-2025-08-07" in observed.betas


def test_first_party_1h_capture_latches_both_eligibilities() -> None:
    turn = Turn.load("025_cc_firstparty_1h_turn1")
    observed = observe(turn.body, turn.betas, DEFAULT_LATCHED_BETAS)
    assert observed == Latches(
        frozenset(b for b in turn.betas if b in DEFAULT_LATCHED_BETAS), ttl_1h=True, global_scope=True
    )
    assert "extended-cache-ttl-2025-04-11" in observed.betas
    assert "claude-code-20250219" not in observed.betas


def test_merged_betas_keep_the_client_order_then_add_latched_ones_sorted() -> None:
    client = ["claude-code-20250219", "effort-2025-11-24"]
    latched = frozenset({"effort-2025-11-24", "interleaved-thinking-2025-05-14", "context-1m-2025-08-07"})
    assert merged_betas(client, latched) == [
        "claude-code-20250219",
        "effort-2025-11-24",
        "context-1m-2025-08-07",
        "interleaved-thinking-2025-05-14",
    ]
    assert merged_betas(client, frozenset()) == client
    assert merged_betas([], frozenset({"b", "a"})) == ["a", "b"]


def test_as_dict_is_json_friendly() -> None:
    latches = Latches(frozenset({"b", "a"}), ttl_1h=True, global_scope=None)
    assert latches.as_dict() == {"betas": ["a", "b"], "ttl_1h": True, "global_scope": None}
