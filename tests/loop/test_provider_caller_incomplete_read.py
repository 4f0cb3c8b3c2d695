"""The in-process provider caller treats ``asyncio.IncompleteReadError`` (a body cut short at the
transport: the first-party client's chunked reader, Bedrock's event-stream frames) as a broken
upstream, like the relay: before content a non-streaming fallback, after content an error event.
It used to escape the caller as an exception."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
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


class CutShort(UpstreamResponse):
    """A real upstream answer whose body breaks with ``IncompleteReadError`` right after the first
    event containing ``marker`` (at once when ``marker`` is empty)."""

    def __init__(self, inner: UpstreamResponse, marker: bytes) -> None:
        self.inner, self.marker = inner, marker
        self.status, self.headers, self.is_event_stream = inner.status, inner.headers, inner.is_event_stream

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        seen = b""
        async for chunk in self.inner.iter_chunks():
            start = len(seen)
            seen += chunk
            found = seen.find(self.marker) if self.marker else 0
            end = seen.find(b"\n\n", found) if found >= 0 else -1
            if found >= 0 and (end >= 0 or not self.marker):
                cut = end + 2 if self.marker else 0
                if cut > start:
                    yield seen[start:cut]
                raise asyncio.IncompleteReadError(seen[:cut], None)
            yield chunk

    async def read(self) -> bytes:
        return await self.inner.read()

    def close(self) -> None:
        self.inner.close()


class CuttingProvider(AnthropicProvider):
    def __init__(self, settings: Settings, marker: bytes) -> None:
        super().__init__(settings)
        self.marker = marker

    async def messages(self, request: PreparedRequest) -> UpstreamResponse:
        response = await super().messages(request)
        return CutShort(response, self.marker) if request.stream else response


async def _collect(emulator: RunningEmulator, marker: bytes) -> list[Any]:
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
        request_id="rid-cut",
    )
    guard = StreamGuard(idle_warning_s=5.0, idle_timeout_s=10.0, nonstreaming_fallback=True)
    async with ProviderModelCaller(
        CuttingProvider(settings, marker), policy=RetryPolicy(max_retries=0), guard=guard
    ) as caller:
        return [item async for item in caller(request)]


@pytest.mark.parametrize("marker", [b"", b"message_start"])
async def test_cut_before_content_falls_back(emulator: RunningEmulator, marker: bytes) -> None:
    items = await _collect(emulator, marker)
    fallback = [i for i in items if isinstance(i, StatusEvent) and i.kind == "fallback"]
    assert fallback and "IncompleteReadError" in fallback[0].message
    kinds = [i["type"] for i in items if isinstance(i, dict)]
    assert kinds[0] == "message_start" and kinds.count("message_start") == 1 and kinds[-1] == "message_stop"
    assert [orjson.loads(r.body).get("stream") is True for r in emulator.requests] == [True, False]


async def test_cut_after_content_is_an_error_event(emulator: RunningEmulator) -> None:
    items = await _collect(emulator, b"content_block_delta")
    kinds = [i["type"] for i in items if isinstance(i, dict)]
    assert kinds[-2:] == ["content_block_delta", "error"] and "message_stop" not in kinds
    assert "IncompleteReadError" in items[-1]["error"]["message"]
    assert [orjson.loads(r.body).get("stream") is True for r in emulator.requests] == [True]
