"""The ``overloaded_after`` and ``model`` fault directives: an overload in the middle of a stream,
after content, for one model only (what a sticky model fallback is tested against)."""

from __future__ import annotations

from typing import Any

import aiohttp
import anthropic
import orjson
import pytest

from emulators import DEFAULT_API_KEY, RunningEmulator
from tests.support.emulator_sdk import MODEL

OTHER = "claude-haiku-4-5"
HEADERS = {"x-api-key": DEFAULT_API_KEY, "anthropic-version": "2023-06-01"}


async def _events(emu: RunningEmulator, model: str, fault: str) -> list[tuple[str, Any]]:
    body = {
        "model": model,
        "max_tokens": 64,
        "stream": True,
        "messages": [{"role": "user", "content": "[[scenario:tool_use]] list the files"}],
        "tools": [{"name": "list_files", "description": "List files.", "input_schema": {"type": "object"}}],
    }
    headers = {**HEADERS, "x-emulator-fault": fault, "x-emulator-fault-key": f"{model}-{fault}"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{emu.base_url}/v1/messages", json=body, headers=headers) as response,
    ):
        assert response.status == 200
        text = (await response.read()).decode()
    frames = [frame for frame in text.split("\n\n") if frame.strip()]
    out: list[tuple[str, Any]] = []
    for frame in frames:
        lines = dict(line.split(": ", 1) for line in frame.splitlines())
        out.append((lines["event"], orjson.loads(lines["data"])))
    return out


async def test_overloaded_after_n_events_sends_the_published_error_event(emu: RunningEmulator) -> None:
    whole = await _events(emu, MODEL, "")
    stops = [i for i, (name, _) in enumerate(whole) if name == "content_block_stop"]
    cut = stops[-1] + 1  # every content block complete, no message_delta / message_stop yet
    events = await _events(emu, MODEL, f"overloaded_after={cut},model={MODEL}")
    assert [(n, e["type"]) for n, e in events[:cut]] == [(n, e["type"]) for n, e in whole[:cut]]
    assert events[cut:] == [
        ("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    ]
    assert any(
        e["type"] == "content_block_start" and e["content_block"]["type"] == "tool_use" for _, e in events
    )


async def test_the_model_directive_spares_other_models(emu: RunningEmulator) -> None:
    events = await _events(emu, OTHER, f"overloaded_after=3,model={MODEL}")
    assert events[-1][0] == "message_stop"
    assert all(name != "error" for name, _ in events)


async def test_the_sdk_sees_an_overloaded_error_after_content(aclient: anthropic.AsyncAnthropic) -> None:
    seen: list[str] = []
    with pytest.raises(anthropic.APIStatusError) as info:
        async with aclient.messages.stream(
            model=MODEL,
            max_tokens=64,
            messages=[{"role": "user", "content": "Tell me something"}],
            extra_headers={"x-emulator-fault": "overloaded_after=6"},
        ) as stream:
            async for event in stream:
                seen.append(event.type)
    assert info.value.type == "overloaded_error"
    assert "text" in seen


@pytest.mark.parametrize("spec", ["overloaded_after=x", "model="])
async def test_malformed_directives_are_a_400(emu: RunningEmulator, spec: str) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{emu.base_url}/v1/messages",
            json={"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]},
            headers={**HEADERS, "x-emulator-fault": spec},
        ) as response,
    ):
        assert response.status == 400
