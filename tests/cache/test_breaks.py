"""Cache-break classification: the table of gateway.cache.breaks.classify."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from gateway.cache.breaks import BreakReason, PreviousRequest, changed_segment, classify
from gateway.cache.prefix import PrefixHashes, prefix_hashes
from gateway.streaming.usage import Usage
from tests.support.cache_turns import Turn

BETAS = ["context-1m-2025-08-07"]
T0 = 1_800_000_000.0
CACHED = 19_000  # what the previous request left in the cache


def usage(read: int, written: int = 0) -> Usage:
    return Usage(input_tokens=10, cache_read_input_tokens=read, cache_write_5m_tokens=written)


def turn2() -> dict[str, Any]:
    return copy.deepcopy(Turn.load("016_cc_tool_bash_turn2").body)


def turn3() -> dict[str, Any]:
    return copy.deepcopy(Turn.load("017_cc_tool_bash_turn3").body)


PREVIOUS = PreviousRequest(prefix_hashes(turn2(), BETAS), T0, CACHED)


def edited(change: Callable[[dict[str, Any]], object], betas: list[str] = BETAS) -> PrefixHashes:
    body = turn3()
    change(body)
    return prefix_hashes(body, betas)


def compacted(body: dict[str, Any]) -> None:
    body["messages"] = [
        {"role": "user", "content": [{"type": "text", "text": "Summary of the session so far"}]}
    ]
    body["messages"][0]["content"][0]["cache_control"] = {"type": "ephemeral"}


def rewound(body: dict[str, Any]) -> None:  # the user went back and asked something else
    del body["messages"][2:]
    body["messages"].append(
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "no, do it differently", "cache_control": {"type": "ephemeral"}}
            ],
        }
    )


def keep(body: dict[str, Any]) -> None:
    return None


CASES: list[tuple[str, PreviousRequest | None, PrefixHashes, Usage, float, BreakReason | None]] = [
    ("first request writes", None, edited(keep), usage(0, 17_000), T0, BreakReason.FIRST_REQUEST),
    ("first request of a known prefix", None, edited(keep), usage(17_000, 100), T0, None),
    ("reads what was left", PREVIOUS, edited(keep), usage(CACHED, 35), T0 + 10, None),
    ("reads more than left", PREVIOUS, edited(keep), usage(CACHED + 5), T0 + 10, None),
    (
        "no breakpoint: nothing was meant to be cached",
        PREVIOUS,
        edited(
            lambda b: [blk.pop("cache_control", None) for blk in b["system"] + b["messages"][-1]["content"]]
        ),
        usage(0),
        T0 + 10,
        None,
    ),
    (
        "unknown previous usage",
        PreviousRequest(PREVIOUS.hashes, T0, None),
        edited(keep),
        usage(0),
        T0 + 10,
        None,
    ),
    (
        "previous cached nothing",
        PreviousRequest(PREVIOUS.hashes, T0, 0),
        edited(keep),
        usage(0),
        T0 + 10,
        None,
    ),
    (
        "model",
        PREVIOUS,
        edited(lambda b: b.update(model="claude-opus-4-7")),
        usage(0),
        T0 + 10,
        BreakReason.MODEL_CHANGED,
    ),
    (
        "betas",
        PREVIOUS,
        edited(keep, [*BETAS, "effort-2025-11-24"]),
        usage(0),
        T0 + 10,
        BreakReason.BETAS_CHANGED,
    ),
    (
        "tools",
        PREVIOUS,
        edited(lambda b: b["tools"].pop()),
        usage(0),
        T0 + 10,
        BreakReason.TOOLS_CHANGED,
    ),
    (
        "static system prompt",
        PREVIOUS,
        edited(lambda b: b["system"][1].update(text="You are someone else.")),
        usage(0),
        T0 + 10,
        BreakReason.SYSTEM_CHANGED,
    ),
    (
        "dynamic system prompt",
        PREVIOUS,
        edited(lambda b: b["system"][2].update(text=b["system"][2]["text"] + " Today is Tuesday.")),
        usage(2_000),
        T0 + 10,
        BreakReason.SYSTEM_CHANGED,
    ),
    ("compaction", PREVIOUS, edited(compacted), usage(17_000), T0 + 10, BreakReason.COMPACTION),
    (
        "an earlier message edited",
        PREVIOUS,
        edited(lambda b: b["messages"][2]["content"][0].update(text="I said something else")),
        usage(17_000),
        T0 + 10,
        BreakReason.MESSAGES_EDITED,
    ),
    (
        "the first message edited, history kept",
        PREVIOUS,
        edited(lambda b: b["messages"][0]["content"][-1].update(text="another prompt")),
        usage(17_000),
        T0 + 10,
        BreakReason.MESSAGES_EDITED,
    ),
    (
        "a rewind: shorter, same first",
        PREVIOUS,
        edited(rewound),
        usage(17_000),
        T0 + 10,
        BreakReason.MESSAGES_EDITED,
    ),
    ("5m ttl expired", PREVIOUS, edited(keep), usage(0, 19_035), T0 + 301, BreakReason.TTL_EXPIRED),
    (
        "within the 5m ttl: an eviction",
        PREVIOUS,
        edited(keep),
        usage(0, 19_035),
        T0 + 299,
        BreakReason.UNKNOWN,
    ),
    (
        "a partial read, nothing changed",
        PREVIOUS,
        edited(keep),
        usage(17_000, 2_035),
        T0 + 10,
        BreakReason.UNKNOWN,
    ),
]


@pytest.mark.parametrize(
    ("previous", "current", "used", "now", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_classification(
    previous: PreviousRequest | None,
    current: PrefixHashes,
    used: Usage,
    now: float,
    expected: BreakReason | None,
) -> None:
    assert classify(previous, current, used, now) == expected


def one_hour(body: dict[str, Any]) -> None:
    for block in [*body["system"][1:], body["messages"][-1]["content"][-1]]:
        block["cache_control"] = {"type": "ephemeral", "ttl": "1h"}


@pytest.mark.parametrize(
    ("elapsed", "expected"), [(301, BreakReason.UNKNOWN), (3601, BreakReason.TTL_EXPIRED)]
)
def test_the_longest_ttl_of_the_previous_request_decides_expiry(
    elapsed: float, expected: BreakReason
) -> None:
    body = turn2()
    one_hour(body)
    previous = PreviousRequest(prefix_hashes(body, BETAS), T0, CACHED)
    assert previous.hashes.ttls == ("1h", "1h", "1h")
    assert classify(previous, edited(one_hour), usage(0), T0 + elapsed) == expected


def test_the_first_differing_segment_wins() -> None:
    def everything(body: dict[str, Any]) -> None:
        body["model"] = "claude-opus-4-7"
        body["tools"].pop()
        body["system"][2]["text"] = "new"

    assert changed_segment(PREVIOUS.hashes, edited(everything)) is BreakReason.MODEL_CHANGED
    assert changed_segment(PREVIOUS.hashes, edited(keep)) is None
    assert changed_segment(PREVIOUS.hashes, PREVIOUS.hashes) is None
