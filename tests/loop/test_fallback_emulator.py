"""Sticky model fallback mid-stream, through the real gateway (SDK caller) and the in-process
provider caller, against the emulator: the primary model is overloaded after its response's
content streamed (a read-only tool call complete, and started), every time; after three overloads
the run switches to the fallback model for good and completes there. Each dropped response is
tombstoned and the tool runs once in all."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import aiohttp
import orjson
import pytest
from pydantic import BaseModel

import loop
from gateway.config import Settings
from gateway.providers.anthropic import AnthropicProvider
from gateway.providers.base import PreparedRequest, UpstreamResponse
from gateway.retry import RetryPolicy
from loop.callers import ProviderModelCaller, SdkModelCaller
from loop.deps import ModelCaller
from loop.events import StatusEvent, Tombstone, ToolStarted
from loop.tools import PermissionMode, PermissionPolicy
from loop.tools.base import Tool, ToolContext
from loop.transitions import Completed, ModelFallback, NextTurn, OverloadRetry
from tests.loop.support import pairing_violations, run_to_end
from tests.support.loop_stack import GATEWAY_KEY, UPSTREAM_KEY, LoopStack

PRIMARY = "claude-sonnet-4-6"
FALLBACK = "claude-haiku-4-5"
PROMPT = "[[scenario:agent]] [[tools:inventory]] take stock"


class InventoryInput(BaseModel):
    path: str


class Inventory(Tool[InventoryInput]):
    """Read-only, so it starts as soon as its block completes, before the response ends."""

    name = "inventory"
    description = "Count the items under a path."
    input_model = InventoryInput
    read_only = True

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def call(self, tool_input: InventoryInput, context: ToolContext) -> str:
        self.calls.append(context.tool_use_id)
        return "42 items"


class FaultyProvider(AnthropicProvider):
    def __init__(self, settings: Settings, fault: str) -> None:
        super().__init__(settings)
        self.fault = fault

    async def messages(self, request: PreparedRequest) -> UpstreamResponse:
        headers = [*request.headers, ("x-emulator-fault", self.fault)]
        return await super().messages(replace(request, headers=headers))


def params(caller: ModelCaller, tool: Inventory) -> loop.QueryParams:
    return loop.QueryParams(
        messages=PROMPT,
        system="You are a test agent.",
        tools=[tool],
        config=loop.LoopConfig(model=PRIMARY, fallback_model=FALLBACK, overload_retry_delay_s=0.01),
        deps=loop.LoopDeps(call_model=caller),
        permissions=PermissionPolicy(mode=PermissionMode.DEFAULT),
    )


async def cut_after_content(stack: LoopStack) -> int:
    """How many SSE frames the primary's first response has before ``message_delta``: every content
    block (the tool call included) complete. Measured on the emulator with the loop's own request."""
    async with SdkModelCaller(stack.emulator.base_url, UPSTREAM_KEY, max_retries=0) as probe:
        await loop.query(params(probe, Inventory())).wait()
    body = orjson.loads(stack.emulator.requests[0].body)
    headers = {"x-api-key": UPSTREAM_KEY, "anthropic-version": "2023-06-01"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{stack.emulator.base_url}/v1/messages", json=body, headers=headers) as response,
    ):
        frames = [f for f in (await response.read()).decode().split("\n\n") if f.strip()]
    names = [f.splitlines()[0].removeprefix("event: ") for f in frames]
    assert "message_delta" in names
    return names.index("message_delta")


@pytest.fixture(params=["sdk", "provider"])
async def storm(request: pytest.FixtureRequest, stack: LoopStack) -> AsyncIterator[tuple[ModelCaller, int]]:
    """The caller, and how many requests the emulator had before the run."""
    fault = f"overloaded_after={await cut_after_content(stack)},model={PRIMARY}"
    before = len(stack.emulator.requests)
    if request.param == "sdk":
        async with SdkModelCaller(
            stack.gateway_url, GATEWAY_KEY, max_retries=0, default_headers={"x-emulator-fault": fault}
        ) as sdk:
            yield sdk, before
    else:
        settings = Settings.from_environ(stack.upstream_environ())
        async with ProviderModelCaller(
            FaultyProvider(settings, fault), policy=RetryPolicy(max_retries=0)
        ) as provider:
            yield provider, before


async def test_overloaded_mid_stream_the_run_falls_back_for_good_and_completes(
    storm: tuple[ModelCaller, int], stack: LoopStack
) -> None:
    caller, before = storm
    tool = Inventory()
    run = loop.query(params(caller, tool))
    events = await run_to_end(run)

    assert run.terminal == Completed("end_turn")
    assert run.state.transitions == (
        OverloadRetry(PRIMARY, 1),
        OverloadRetry(PRIMARY, 2),
        ModelFallback(PRIMARY, FALLBACK),
        NextTurn(1),
    )
    assert run.state.model == FALLBACK
    bodies = [
        orjson.loads(r.body) for r in stack.emulator.requests[before:] if r.path.startswith("/v1/messages")
    ]
    assert [b["model"] for b in bodies] == [PRIMARY, PRIMARY, PRIMARY, FALLBACK, FALLBACK]
    for body in bodies:
        assert pairing_violations(body["messages"]) == []

    tombstones = [e for e in events if isinstance(e, Tombstone)]
    assert [t.reason for t in tombstones] == ["overload_retry", "overload_retry", "model_fallback"]
    for tombstone in tombstones:
        (call,) = [b for b in tombstone.message["content"] if b["type"] == "tool_use"]
        (result,) = tombstone.results["content"]
        assert result["tool_use_id"] == call["id"] and result["content"] == "42 items"
    # no tool runs twice: it ran once, in the first dropped response; the retries reused its result
    assert len(tool.calls) == 1
    assert len([e for e in events if isinstance(e, ToolStarted)]) == 1
    history = run.messages
    assert pairing_violations(history) == []
    answered = [
        b for m in history for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_result"
    ]
    assert [r["content"] for r in answered] == ["42 items"]
    fallback_status: list[Any] = [e for e in events if isinstance(e, StatusEvent) and e.kind == "fallback"]
    assert [e.model for e in fallback_status] == [FALLBACK]
