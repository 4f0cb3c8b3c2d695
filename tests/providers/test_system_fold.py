"""Mid-conversation ``role: "system"`` messages: kept for Bedrock and Vertex by default, folded
only for targets named by ``GATEWAY_FOLD_SYSTEM_MESSAGES``; and the whole per-provider transform
is deterministic, so each Claude Code turn's shaped history starts with the previous turn's."""

from __future__ import annotations

import copy
import itertools
from typing import Any

import orjson
import pytest

from gateway.config import ProviderName, Settings
from gateway.providers.base import ClientRequest, Operation
from gateway.providers.bedrock_request import invoke_body
from gateway.providers.betas import BetaPolicy
from gateway.providers.preparation import Shaped, resolver_for, shape
from gateway.providers.system_fold import REMINDER, applies, fold_system_messages
from tests.providers.claude_code_turns import cc332_turns, headers_of, load, strip_markers

MID = "mid-conversation-system-2026-04-07"
ENV = {
    ProviderName.BEDROCK: {"GATEWAY_PROVIDER": "bedrock", "AWS_REGION": "us-east-1"},
    ProviderName.VERTEX: {"GATEWAY_PROVIDER": "vertex", "CLOUD_ML_REGION": "us-east5"},
    ProviderName.FOUNDRY: {
        "GATEWAY_PROVIDER": "foundry",
        "ANTHROPIC_FOUNDRY_BASE_URL": "http://127.0.0.1:9/anthropic",
    },
}


def reminder(text: str) -> dict[str, Any]:
    return {"type": "text", "text": f"<system-reminder>\n{text}\n</system-reminder>"}


def test_reminder_wording_is_claude_codes() -> None:
    # fixtures README 1.4 (2.1.197 on Bedrock/Vertex): "<system-reminder>\n...\n</system-reminder>"
    assert REMINDER.format(text="x") == "<system-reminder>\nx\n</system-reminder>"


def test_fold_appends_to_the_user_turn_before_it() -> None:
    marked = {"type": "text", "text": "agents", "cache_control": {"type": "ephemeral"}}
    payload: dict[str, Any] = {
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "system", "content": [marked], "output_config": {"effort": "low"}},
            {"role": "system", "content": "skills"},
        ]
    }
    assert fold_system_messages(payload)
    assert payload["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "hi"},
                {**reminder("agents"), "cache_control": {"type": "ephemeral"}},  # the breakpoint stays
                reminder("skills"),
            ],
        }
    ]


def test_fold_elsewhere_makes_a_user_turn_in_place() -> None:
    payload: dict[str, Any] = {
        "messages": [
            {"role": "system", "content": "first"},
            {"role": "user", "content": [{"type": "text", "text": "q"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "a"}]},
            {"role": "system", "content": "late"},
            {"role": "system", "content": []},  # nothing to say: dropped
        ]
    }
    assert fold_system_messages(payload)
    assert payload["messages"] == [
        {"role": "user", "content": [reminder("first")]},
        {"role": "user", "content": [{"type": "text", "text": "q"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "a"}]},
        {"role": "user", "content": [reminder("late")]},
    ]
    untouched: dict[str, Any] = {"messages": [{"role": "user", "content": "x"}]}
    assert not fold_system_messages(untouched) and untouched == {
        "messages": [{"role": "user", "content": "x"}]
    }


def test_fold_targets_match_client_or_upstream_model_ids() -> None:
    assert applies(["*"], "claude-opus-4-8", "us.anthropic.claude-opus-4-8-v1")
    assert applies(["us.anthropic.*"], "claude-opus-4-8", "us.anthropic.claude-opus-4-8-v1")
    assert applies(["claude-sonnet-4-5*", "x"], "claude-sonnet-4-5", "claude-sonnet-4-5@20250929")
    assert not applies(["*sonnet*"], "claude-opus-4-8", "us.anthropic.claude-opus-4-8-v1")
    assert not applies([], "claude-opus-4-8")
    settings = Settings.from_environ({"GATEWAY_FOLD_SYSTEM_MESSAGES": "*sonnet-4-5*, us.anthropic.*"})
    assert settings.models.fold_system_messages == frozenset({"*sonnet-4-5*", "us.anthropic.*"})
    assert Settings.from_environ({}).models.fold_system_messages == frozenset()
    assert Settings.from_environ({"GATEWAY_FOLD_SYSTEM_MESSAGES": "true"}).models.fold_system_messages == {"*"}
    assert Settings.from_environ({"GATEWAY_FOLD_SYSTEM_MESSAGES": "off"}).models.fold_system_messages == frozenset()


def shaped(provider: ProviderName, body: dict[str, Any], headers: dict[str, str], fold: str = "") -> Shaped:
    env = {**ENV[provider], "GATEWAY_FOLD_SYSTEM_MESSAGES": fold}
    settings = Settings.from_environ(env)
    request = ClientRequest(
        Operation.MESSAGES, orjson.dumps(body), copy.deepcopy(body), list(headers.items()), "req"
    )
    return shape(
        request,
        provider,
        resolver_for(settings),
        BetaPolicy.from_settings(settings.models.beta_policy),
        fold_targets=settings.models.fold_system_messages,
    )


@pytest.mark.parametrize("provider", [ProviderName.BEDROCK, ProviderName.VERTEX])
def test_clouds_get_system_messages_as_they_are_without_the_beta(provider: ProviderName) -> None:
    fixture = load("015_cc_tool_bash_turn1")  # 2.1.197 first party: role "system" + its beta
    prepared = shaped(provider, fixture["body"], headers_of(fixture))
    assert [m["role"] for m in prepared.payload["messages"]] == ["user", "system"]
    assert MID in prepared.dropped_betas and MID not in prepared.betas + prepared.body_betas


@pytest.mark.parametrize("provider", [ProviderName.BEDROCK, ProviderName.VERTEX, ProviderName.FOUNDRY])
def test_a_configured_target_gets_them_folded_and_never_the_beta(provider: ProviderName) -> None:
    fixture = load("015_cc_tool_bash_turn1")
    prepared = shaped(provider, fixture["body"], headers_of(fixture), fold="*")
    roles = [m["role"] for m in prepared.payload["messages"]]
    assert roles == ["user"] and prepared.body_changed
    system_text = fixture["body"]["messages"][1]["content"]
    assert prepared.payload["messages"][0]["content"][-1] == reminder(system_text)
    assert MID in prepared.dropped_betas and MID not in prepared.betas
    # a turn without system messages loses the beta too, so the beta set stays the same all session
    no_system = copy.deepcopy(fixture["body"])
    no_system["messages"] = no_system["messages"][:1]
    again = shaped(provider, no_system, headers_of(fixture), fold="*")
    assert MID not in again.betas and again.betas == prepared.betas
    other = shaped(provider, fixture["body"], headers_of(fixture), fold="*sonnet*")  # not this model
    assert [m["role"] for m in other.payload["messages"]] == ["user", "system"]


def canonical(messages: list[Any]) -> bytes:
    """The messages without breakpoints, a string content as the one text block it stands for
    (2.1.332 sends its trailing system message as blocks with the breakpoint, then as a string)."""
    blocks = [
        {**m, "content": [{"type": "text", "text": m["content"]}]} if isinstance(m.get("content"), str) else m
        for m in messages
    ]
    return orjson.dumps(strip_markers(blocks))


def claude_code_sessions() -> dict[str, list[tuple[dict[str, Any], dict[str, str]]]]:
    cc197 = [load(n) for n in ("015_cc_tool_bash_turn1", "016_cc_tool_bash_turn2", "017_cc_tool_bash_turn3")]
    return {"cc197": [(f["body"], headers_of(f)) for f in cc197], "cc332": cc332_turns()}


@pytest.mark.parametrize("fold", ["", "*"])
@pytest.mark.parametrize("provider", [ProviderName.BEDROCK, ProviderName.VERTEX, ProviderName.FOUNDRY])
@pytest.mark.parametrize("session", ["cc197", "cc332"])
def test_each_turn_starts_with_the_previous_turns_shaped_prefix(
    provider: ProviderName, session: str, fold: str
) -> None:
    turns = [shaped(provider, body, headers, fold) for body, headers in claude_code_sessions()[session]]
    wire = [
        invoke_body(t.payload, t.body_betas) if provider is ProviderName.BEDROCK else t.payload for t in turns
    ]
    for (previous, current), (before, after) in zip(
        itertools.pairwise(wire), itertools.pairwise(turns), strict=True
    ):
        assert orjson.dumps(current["tools"]) == orjson.dumps(previous["tools"])
        assert orjson.dumps(current["system"]) == orjson.dumps(previous["system"])
        assert (after.betas, after.body_betas) == (before.betas, before.body_betas)
        history = len(previous["messages"])
        assert len(current["messages"]) > history
        # the same bytes up to where the client moved its breakpoint
        assert canonical(current["messages"][:history]) == canonical(previous["messages"])
        assert canonical(previous["messages"])[:-1] in canonical(current["messages"])
    roles = {m["role"] for t in turns for m in t.payload["messages"]}
    assert ("system" in roles) == (fold == "")
    if provider is not ProviderName.FOUNDRY:
        assert all("output_config" not in m for t in turns for m in t.payload["messages"])
        assert all("context_management" not in t.payload for t in turns)
