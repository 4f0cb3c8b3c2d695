"""Session placement per route, and a session whose placement is gone.

Claude Code sends its side requests (haiku: titles, summaries) with the main conversation's session
id; with per-model routes they go elsewhere, and must not move the conversation's placement. A
session the gateway no longer knows (idle past ``idle_s``) on a route over several providers may
carry another provider's thinking signatures: they are not replayed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import anthropic
import pytest

from tests.upstreams.harness import MODEL, SYSTEM, four_upstreams
from tests.upstreams.test_failover_faults import STORM, Clock, _turn

pytestmark = pytest.mark.timeout(60)


async def test_a_side_request_on_another_route_leaves_the_conversation_where_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sections = {
        "failover": {"same_upstream_retries": 0},
        "routes": [
            {"models": ["claude-opus-*"], "upstreams": ["primary", "foundry"]},
            {"models": ["claude-haiku-*"], "upstreams": ["vertex"]},
        ],
    }
    async with four_upstreams(
        tmp_path, monkeypatch, sections=sections, providers=("anthropic", "foundry", "vertex")
    ) as fleet:
        client = fleet.client("s-side")
        await _turn(client, "one")
        fleet.emulators["primary"].set_fault(STORM)
        await _turn(client, "two")  # moves to foundry
        fleet.emulators["primary"].set_fault("")
        await client.messages.create(
            model="claude-haiku-4-5", max_tokens=16, messages=[{"role": "user", "content": "a title"}]
        )
        assert fleet.served("vertex") == 1
        served = fleet.served("primary"), fleet.served("foundry")
        await _turn(client, "three")  # still on foundry: its cache is there
        assert (fleet.served("primary"), fleet.served("foundry")) == (served[0], served[1] + 1)
        moves = fleet.metric("gateway_session_moves_total", **{"from": "foundry", "to": "primary", "reason": "return"})
        assert moves == 0


async def test_a_session_resumed_after_its_placement_expired_leaves_thinking_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Moved from the first party to Bedrock, then idle past ``idle_s``: the next request goes to
    the route's first choice, the first party, without Bedrock's thinking signatures."""
    clock = Clock()
    sections = {
        "failover": {"same_upstream_retries": 0},
        "breaker": {"failures": 100},
        "affinity": {"return_after_s": 300, "idle_s": 600},
    }
    thinking: anthropic.types.ThinkingConfigParam = {"type": "enabled", "budget_tokens": 1024}
    async with four_upstreams(
        tmp_path,
        monkeypatch,
        sections=sections,
        providers=("anthropic", "bedrock"),
        app_kwargs={"wall_clock": clock},
    ) as fleet:
        client = fleet.client("s-resumed")
        history: list[anthropic.types.MessageParam] = [{"role": "user", "content": "think first"}]

        async def ask() -> anthropic.types.Message:
            message = await client.messages.create(
                model=MODEL, max_tokens=2048, system=SYSTEM, thinking=thinking, messages=history
            )
            history.append({"role": "assistant", "content": [cast(Any, b.model_dump()) for b in message.content]})
            history.append({"role": "user", "content": f"and then ({len(history)})?"})  # distinct turns
            return message

        await ask()
        fleet.emulators["primary"].set_fault(STORM)
        second = await ask()  # on Bedrock
        assert second.content[0].type == "thinking" and fleet.served("bedrock") == 1
        fleet.emulators["primary"].set_fault("")
        clock.now += 601  # resumed after idle_s: the placement expired
        third = await ask()
        sent = [r for r in fleet.emulators["primary"].requests if r.method == "POST"]
        assert len(sent) == 3
        assert second.content[0].signature.encode() not in sent[-1].body
        assert third.content[0].type == "thinking"
        await ask()  # placed again: the turns before stay without thinking, the first party's own keep it
        sent = [r for r in fleet.emulators["primary"].requests if r.method == "POST"]
        assert second.content[0].signature.encode() not in sent[-1].body
        assert third.content[0].signature.encode() in sent[-1].body


THINKING: anthropic.types.ThinkingConfigParam = {"type": "enabled", "budget_tokens": 1024}


class _Conversation:
    """One conversation through the gateway with thinking on; its turns as they came back."""

    def __init__(self, client: anthropic.AsyncAnthropic) -> None:
        self.client = client
        self.history: list[anthropic.types.MessageParam] = [{"role": "user", "content": "think first"}]

    async def ask(self, model: str = MODEL) -> anthropic.types.Message:
        message = await self.client.messages.create(
            model=model, max_tokens=2048, system=SYSTEM, thinking=THINKING, messages=self.history
        )
        self.history.append({"role": "assistant", "content": [cast(Any, b.model_dump()) for b in message.content]})
        self.history.append({"role": "user", "content": f"and then ({len(self.history)})?"})
        return message


def _signature(message: anthropic.types.Message) -> bytes:
    block = message.content[0]
    assert block.type == "thinking"
    return block.signature.encode()


async def test_a_short_request_of_the_session_does_not_vouch_for_the_conversations_thinking(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The conversation moved to Bedrock after four messages; a one-message request under its
    session id (a title, a sub-agent's first turn: another conversation, one route) comes between.
    Bedrock never gets the first party's thinking."""
    sections = {"failover": {"same_upstream_retries": 0}, "breaker": {"failures": 100}}
    async with four_upstreams(tmp_path, monkeypatch, sections=sections, providers=("anthropic", "bedrock")) as fleet:
        client = fleet.client("s-short")
        main = _Conversation(client)
        first, second = await main.ask(), await main.ask()
        fleet.emulators["primary"].set_fault(STORM)
        await main.ask()  # moves to Bedrock
        fleet.emulators["primary"].set_fault("")
        await client.messages.create(model=MODEL, max_tokens=16, messages=[{"role": "user", "content": "a title"}])
        await main.ask()
        body = [r for r in fleet.emulators["bedrock"].requests if r.method == "POST"][-1].body
        assert _signature(first) not in body and _signature(second) not in body


async def test_a_conversation_switching_routes_keeps_each_providers_thinking_to_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``/model sonnet`` sends a turn of the conversation to its route's first choice (Bedrock),
    ``/model opus`` back to the first party: Bedrock's thinking does not go with it."""
    sections = {
        "failover": {"same_upstream_retries": 0},
        "routes": [
            {"models": ["claude-opus-*"], "upstreams": ["primary", "bedrock"]},
            {"models": ["claude-sonnet-*"], "upstreams": ["bedrock", "primary"]},
        ],
    }
    async with four_upstreams(tmp_path, monkeypatch, sections=sections, providers=("anthropic", "bedrock")) as fleet:
        main = _Conversation(fleet.client("s-switch"))
        await main.ask("claude-opus-4-5")
        await main.ask("claude-opus-4-5")
        on_bedrock = await main.ask("claude-sonnet-4-5")
        assert fleet.served("bedrock") == 1
        back = await main.ask("claude-opus-4-5")
        body = [r for r in fleet.emulators["primary"].requests if r.method == "POST"][-1].body
        assert _signature(on_bedrock) not in body
        await main.ask("claude-opus-4-5")  # the first party's own thinking since is kept
        body = [r for r in fleet.emulators["primary"].requests if r.method == "POST"][-1].body
        assert _signature(on_bedrock) not in body and _signature(back) in body
