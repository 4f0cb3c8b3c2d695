"""The in-process provider caller gets the server's stream protections: idle watchdog, idle
warnings as status events, and a non-streaming fallback when a stream fails before any content."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import orjson
import pytest

from emulators import RunningEmulator
from gateway.config import Settings
from gateway.providers.anthropic import AnthropicProvider
from gateway.providers.base import PreparedRequest, UpstreamResponse
from gateway.retry import RetryPolicy
from loop.callers.provider import ProviderModelCaller, StreamGuard
from loop.events import StatusEvent
from loop.request import ModelRequest
from tests.support.loop_stack import UPSTREAM_KEY


class FaultyProvider(AnthropicProvider):
    """The first-party provider, with an emulator fault header on every request."""

    def __init__(self, settings: Settings, fault: str) -> None:
        super().__init__(settings)
        self.fault = fault

    async def messages(self, request: PreparedRequest) -> UpstreamResponse:
        headers = [*request.headers, ("x-emulator-fault", self.fault), ("x-emulator-fault-key", self.fault)]
        return await super().messages(replace(request, headers=headers))


GUARD = StreamGuard(idle_warning_s=0.1, idle_timeout_s=0.25, nonstreaming_fallback=True)


async def _collect(emulator: RunningEmulator, fault: str, guard: StreamGuard = GUARD) -> list[Any]:
    settings = Settings.from_environ(
        {"ANTHROPIC_API_KEY": UPSTREAM_KEY, "ANTHROPIC_BASE_URL": emulator.base_url}
    )
    request = ModelRequest(
        body={
            "model": "claude-sonnet-4-6",
            "max_tokens": 64,
            "stream": True,
            "messages": [{"role": "user", "content": "Tell me a story"}],
        },
        betas=(),
        request_id="rid-guard",
    )
    items: list[Any] = []
    async with ProviderModelCaller(
        FaultyProvider(settings, fault), policy=RetryPolicy(max_retries=0), guard=guard
    ) as caller:
        stream: AsyncIterator[Any] = caller(request)
        async for item in stream:
            items.append(item)
    return items


def _types(items: list[Any]) -> list[str]:
    return [i["type"] if isinstance(i, dict) else f"status:{i.kind}" for i in items]


def _streamed(emulator: RunningEmulator) -> list[bool]:
    return [orjson.loads(r.body).get("stream") is True for r in emulator.requests]


async def test_stall_before_content_falls_back_once(emulator: RunningEmulator) -> None:
    items = await _collect(emulator, "stall_after=2:1,first=1")
    kinds = _types(items)
    assert "status:idle_warning" in kinds and "status:fallback" in kinds
    events = [k for k in kinds if not k.startswith("status:")]
    assert events[0] == "message_start" and events.count("message_start") == 1  # held back, not doubled
    assert events[-1] == "message_stop" and "content_block_delta" in events
    assert _streamed(emulator) == [True, False]


async def test_stall_after_content_is_an_error_event_without_replay(emulator: RunningEmulator) -> None:
    items = await _collect(emulator, "stall_after=4:1")
    assert isinstance(items[-1], dict) and items[-1]["type"] == "error"
    assert "stalled" in items[-1]["error"]["message"]
    assert _streamed(emulator) == [True]


async def test_truncation_before_content_falls_back(emulator: RunningEmulator) -> None:
    items = await _collect(emulator, "truncate_after=2,first=1")
    assert _types(items)[-1] == "message_stop"
    assert _streamed(emulator) == [True, False]


@pytest.mark.parametrize("fault", ["stall_after=2:1", "truncate_after=2"])
async def test_fallback_can_be_disabled(emulator: RunningEmulator, fault: str) -> None:
    items = await _collect(emulator, fault, replace(GUARD, nonstreaming_fallback=False))
    assert items[-1]["type"] == "error"
    assert not any(isinstance(i, StatusEvent) and i.kind == "fallback" for i in items)
    assert _streamed(emulator) == [True]
