"""The per-provider beta table (``gateway.providers.shaping``) as ``BetaPolicy.apply`` applies it:
every row, then what Claude Code's first-party beta sets become on each cloud, compared with what
Claude Code sends that cloud in its own provider mode (providers.md section 7, fixtures 047/050)."""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest

from gateway.config import ProviderName, Settings
from gateway.providers.betas import BODY_HALVES, BetaPolicy
from gateway.providers.shaping import TABLES, Placement, Row
from tests.support.claude_code_betas import CC197_OPUS_FIRST_PARTY, CC332_FIRST_PARTY

BEDROCK, VERTEX = ProviderName.BEDROCK, ProviderName.VERTEX
DEFAULT = BetaPolicy.from_settings({})

CLEAR_THINKING = {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}


def claude_code_body() -> dict[str, Any]:
    """A body carrying every body field a row can pair with (as Claude Code sends them)."""
    scoped = {"type": "ephemeral", "ttl": "1h", "scope": "global"}
    return {
        "model": "claude-opus-4-8",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": scoped}]},
            {"role": "system", "content": "Environment", "output_config": {"effort": "medium"}},
        ],
        "system": [{"type": "text", "text": "You are", "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
        "context_management": copy.deepcopy(CLEAR_THINKING),
        "output_config": {"effort": "high", "format": {"type": "json_schema", "schema": {}}},
        "output_format": {"type": "json_schema", "schema": {}},
        "tags": {"team": "a"},
        "max_tokens": 64,
    }


ROWS = [
    pytest.param(provider, row, id=f"{provider}-{row.beta}")
    for provider, rows in TABLES.items()
    for row in rows
]


@pytest.mark.parametrize(("provider", "row"), ROWS)
def test_every_row_does_what_it_says(provider: ProviderName, row: Row) -> None:
    assert row.source.strip(), "every row names its source"
    payload = claude_code_body()
    original = claude_code_body()
    decision = DEFAULT.apply(provider, [row.beta], payload)
    kept = row.placement is not None and (row.only_if is None or row.only_if(original))
    if kept:
        assert decision.dropped == []
        assert (row.upstream_name in decision.header) == (row.placement in (Placement.HEADER, Placement.BOTH))
        assert (row.upstream_name in decision.body) == (row.placement in (Placement.BODY, Placement.BOTH))
        assert payload == original  # a kept beta keeps its body field
    else:
        assert decision.dropped == [row.beta] and decision.header == decision.body == []
        if row.beta in BODY_HALVES and not row.keeps_body_field:
            assert payload != original and decision.body_changed
        else:
            assert payload == original and not decision.body_changed


def test_each_table_names_each_beta_once() -> None:
    for rows in TABLES.values():
        names = [row.beta for row in rows]
        assert len(names) == len(set(names))


def test_first_party_only_body_fields_go_with_their_betas() -> None:
    for provider in (BEDROCK, VERTEX):
        payload = claude_code_body()
        DEFAULT.apply(
            provider,
            [
                *CC332_FIRST_PARTY,
                "prompt-caching-scope-2026-01-05",
                "request-tags-2026-08-21",
                "structured-outputs-2025-12-15",
                "extended-cache-ttl-2025-04-11",
            ],
            payload,
        )
        assert (
            "context_management" not in payload and "tags" not in payload and "output_format" not in payload
        )
        assert payload["output_config"] == {"effort": "high"}  # effort stays, the format goes
        assert payload["messages"][1] == {
            "role": "system",
            "content": "Environment",
        }  # kept, without output_config
        # the scope goes, the 1h ttl stays (native on both clouds)
        assert payload["messages"][0]["content"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
        assert payload["system"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}


def test_claude_code_2_1_332_becomes_its_own_bedrock_mode() -> None:
    payload = claude_code_body()
    decision = DEFAULT.apply(BEDROCK, list(CC332_FIRST_PARTY), payload)
    # providers.md s7, Bedrock mode
    assert decision.header == ["claude-code-20250219", "thinking-token-count-2026-05-13", "effort-2025-11-24"]
    assert decision.body == [
        "interleaved-thinking-2025-05-14",
        "tool-search-tool-2025-10-19",
        "thinking-token-count-2026-05-13",
    ]
    assert decision.dropped == [
        "context-management-2025-06-27",
        "per-turn-control-2026-07-01",
        "mid-conversation-tool-changes-2026-07-01",
    ]


def test_claude_code_2_1_332_becomes_its_own_vertex_mode() -> None:
    decision = DEFAULT.apply(VERTEX, list(CC332_FIRST_PARTY), claude_code_body())
    # providers.md s7, Vertex mode, less web-search-2025-03-05: Claude Code adds that one only in
    # Vertex mode, and the gateway adds no beta a client did not send
    assert decision.header == [
        "claude-code-20250219",
        "interleaved-thinking-2025-05-14",
        "thinking-token-count-2026-05-13",
        "tool-search-tool-2025-10-19",
        "effort-2025-11-24",
    ]
    assert decision.body == []


def test_claude_code_2_1_197_bedrock_mode_split() -> None:
    # fixture 047: Claude Code's own Bedrock request, header "claude-code-20250219", body
    # [interleaved-thinking, tool-search-tool]; replayed with all three in one header
    decision = DEFAULT.apply(
        BEDROCK,
        ["claude-code-20250219", "interleaved-thinking-2025-05-14", "tool-search-tool-2025-10-19"],
        {"messages": []},
    )
    assert decision.header == ["claude-code-20250219"]
    assert decision.body == ["interleaved-thinking-2025-05-14", "tool-search-tool-2025-10-19"]


def test_claude_code_2_1_197_first_party_opus() -> None:
    bedrock = DEFAULT.apply(BEDROCK, list(CC197_OPUS_FIRST_PARTY), claude_code_body())
    assert bedrock.header == ["claude-code-20250219", "thinking-token-count-2026-05-13", "effort-2025-11-24"]
    assert bedrock.body == [
        "interleaved-thinking-2025-05-14",
        "context-1m-2025-08-07",
        "thinking-token-count-2026-05-13",
    ]
    assert set(bedrock.dropped) == {
        "context-management-2025-06-27",
        "prompt-caching-scope-2026-01-05",
        "mid-conversation-system-2026-04-07",
    }
    vertex = DEFAULT.apply(VERTEX, list(CC197_OPUS_FIRST_PARTY), claude_code_body())
    assert vertex.header == [
        "claude-code-20250219",
        "interleaved-thinking-2025-05-14",
        "thinking-token-count-2026-05-13",
        "effort-2025-11-24",
        "context-1m-2025-08-07",
    ]
    assert vertex.dropped == bedrock.dropped


@pytest.mark.parametrize("provider", [BEDROCK, VERTEX])
def test_the_result_does_not_depend_on_the_clients_order(provider: ProviderName) -> None:
    reference = DEFAULT.apply(provider, list(CC332_FIRST_PARTY), claude_code_body())
    shuffled = list(CC332_FIRST_PARTY)
    random.Random(7).shuffle(shuffled)
    assert shuffled != list(CC332_FIRST_PARTY)
    again = DEFAULT.apply(provider, shuffled, claude_code_body())
    assert (again.header, again.body) == (reference.header, reference.body)


def test_a_renamed_beta_is_sent_once() -> None:
    decision = DEFAULT.apply(
        BEDROCK, ["advanced-tool-use-2025-11-20", "tool-search-tool-2025-10-19"], {"messages": []}
    )
    assert decision.body == ["tool-search-tool-2025-10-19"] and decision.dropped == []


@pytest.mark.parametrize("provider", [BEDROCK, VERTEX])
def test_unknown_betas_are_dropped_and_counted_as_known_or_other(provider: ProviderName) -> None:
    payload = {"messages": [], "tags": {"a": "b"}}
    decision = DEFAULT.apply(provider, ["made-up-2099-01-01", "claude-code-20250219"], payload)
    assert decision.dropped == ["made-up-2099-01-01"]
    assert decision.header == ["claude-code-20250219"]
    assert payload["tags"] == {"a": "b"}  # a field without its beta is not touched
    known = DEFAULT.known_betas()
    assert "made-up-2099-01-01" not in known
    assert {row.beta for rows in TABLES.values() for row in rows} <= known


def test_bedrock_keeps_context_management_for_tool_use_clearing_only() -> None:
    clearing = {"messages": [], "context_management": {"edits": [{"type": "clear_tool_uses_20250919"}]}}
    kept = DEFAULT.apply(BEDROCK, ["context-management-2025-06-27"], clearing)
    assert kept.body == ["context-management-2025-06-27"] and "context_management" in clearing
    thinking = {"messages": [], "context_management": copy.deepcopy(CLEAR_THINKING)}
    dropped = DEFAULT.apply(BEDROCK, ["context-management-2025-06-27"], thinking)
    assert dropped.dropped == ["context-management-2025-06-27"] and "context_management" not in thinking
    count = DEFAULT.apply(BEDROCK, ["context-management-2025-06-27"], {"messages": []})  # no field
    assert count.body == ["context-management-2025-06-27"]
    vertex = {"messages": [], "context_management": {"edits": [{"type": "clear_tool_uses_20250919"}]}}
    assert DEFAULT.apply(VERTEX, ["context-management-2025-06-27"], vertex).dropped == [
        "context-management-2025-06-27"
    ]


@pytest.mark.parametrize("provider", [ProviderName.ANTHROPIC, ProviderName.FOUNDRY])
def test_first_party_surfaces_pass_everything_in_the_clients_order(provider: ProviderName) -> None:
    betas = [*reversed(CC332_FIRST_PARTY), "made-up-2099-01-01"]
    payload = claude_code_body()
    decision = DEFAULT.apply(provider, betas, payload)
    assert decision.header == betas and decision.body == [] and decision.dropped == []
    assert payload == claude_code_body()


def test_gateway_beta_policy_overrides() -> None:
    settings = Settings.from_environ(
        {
            "GATEWAY_BETA_POLICY": '{"bedrock": ["interleaved-thinking-2025-05-14", '
            '"mid-conversation-tool-changes-2026-07-01", "tool-search-tool-2025-10-19"], "vertex": ["*"], '
            '"foundry": ["claude-code-20250219"]}'
        }
    )
    policy = BetaPolicy.from_settings(settings.models.beta_policy)
    bedrock = policy.apply(BEDROCK, list(CC332_FIRST_PARTY), claude_code_body())
    # the listed ones only; a beta without a body placement of its own goes in Bedrock's body;
    # the first-party name of tool search is accepted through its Bedrock name
    assert bedrock.header == []
    assert bedrock.body == [
        "interleaved-thinking-2025-05-14",
        "tool-search-tool-2025-10-19",
        "mid-conversation-tool-changes-2026-07-01",
    ]
    assert "claude-code-20250219" in bedrock.dropped
    vertex_payload = claude_code_body()
    vertex = policy.apply(VERTEX, list(CC332_FIRST_PARTY), vertex_payload)
    assert vertex.dropped == [] and vertex_payload == claude_code_body()  # "*": all kept, fields too
    assert "tool-search-tool-2025-10-19" in vertex.header and "per-turn-control-2026-07-01" in vertex.header
    foundry = policy.apply(ProviderName.FOUNDRY, list(CC332_FIRST_PARTY), claude_code_body())
    assert foundry.header == ["claude-code-20250219"] and len(foundry.dropped) == 7
    assert policy.keeps(BEDROCK, "mid-conversation-tool-changes-2026-07-01", {})
    assert not DEFAULT.keeps(BEDROCK, "mid-conversation-tool-changes-2026-07-01", {})
