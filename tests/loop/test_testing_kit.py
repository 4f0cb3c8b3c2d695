"""``loop.testing``: the virtual clock, and fake responses that are real API stream events."""

from __future__ import annotations

import asyncio

import pytest
from anthropic.types import RawMessageStreamEvent
from pydantic import TypeAdapter

from loop.testing import FakeResponse, VirtualClock, text, thinking, tool_use

STREAM_EVENT = TypeAdapter(RawMessageStreamEvent)


async def test_concurrent_sleeps_overlap() -> None:
    clock = VirtualClock()
    finished: list[tuple[str, float]] = []

    async def worker(name: str, seconds: float) -> None:
        await clock.sleep(seconds)
        finished.append((name, clock.now()))

    await asyncio.gather(worker("a", 5), worker("b", 2), worker("c", 5))
    assert finished == [("b", 2), ("a", 5), ("c", 5)]
    assert clock.now() == 5


async def test_timeout_fires_at_its_deadline() -> None:
    clock = VirtualClock(start=100)
    with pytest.raises(TimeoutError):
        async with clock.timeout(10):
            await clock.sleep(60)
    assert clock.now() == 110
    async with clock.timeout(10):
        await clock.sleep(5)
    assert clock.now() == 115


async def test_a_timeout_alone_does_not_make_time_pass() -> None:
    clock = VirtualClock()
    async with clock.timeout(1):
        await asyncio.to_thread(sum, range(1000))  # real work, no sleeper: the timeout must not fire
    assert clock.now() == 0


async def test_manual_mode_moves_only_when_told() -> None:
    clock = VirtualClock(autojump=False)
    task = asyncio.create_task(clock.sleep(10))
    for _ in range(200):
        await asyncio.sleep(0)
    assert not task.done() and clock.now() == 0 and clock.pending_timers() == 1
    clock.advance(9.5)
    await asyncio.sleep(0)
    assert not task.done()
    clock.advance(0.5)
    await task
    assert clock.now() == 10
    with pytest.raises(ValueError):
        clock.advance(-1)


async def test_a_cancelled_sleep_leaves_no_timer() -> None:
    clock = VirtualClock(autojump=False)
    task = asyncio.create_task(clock.sleep(10))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert clock.pending_timers() == 0


@pytest.mark.parametrize(
    "response",
    [
        FakeResponse.of(text("hello world"), chunk_chars=3),
        FakeResponse.of(
            thinking("hmm, let me see"), text("answer"), tool_use("read", {"path": "a"}, id="toolu_1")
        ),
        FakeResponse.of(text("truncated"), stop_reason="max_tokens"),
        FakeResponse.of(text("paused"), stop_reason="pause_turn"),
        FakeResponse.of(text("no"), stop_reason="refusal", stop_details={"type": "refusal"}),
        FakeResponse.of(text("cut"), stop_reason="model_context_window_exceeded"),
        FakeResponse.of(text("x"), stop_reason="stop_sequence", stop_sequence="STOP"),
        FakeResponse.of(text("about to fail"), fail_after=3),
    ],
    ids=["text", "thinking+tool", "max_tokens", "pause_turn", "refusal", "context", "stop_sequence", "error"],
)
def test_fake_events_validate_as_the_sdk_stream_event_types(response: FakeResponse) -> None:
    events = response.events()
    for event in events:
        if event["type"] == "error":
            assert set(event) == {"type", "error"} and set(event["error"]) == {"type", "message"}
            continue
        parsed = STREAM_EVENT.validate_python(event)
        assert parsed.type == event["type"]
    if response.fail_after is None:
        assert [e["type"] for e in events][-2:] == ["message_delta", "message_stop"]
        assert events[-2]["delta"]["stop_reason"] == response.resolved_stop_reason


def test_thinking_streams_its_signature_last() -> None:
    events = FakeResponse.of(thinking("abc", signature="sig")).events()
    deltas = [e["delta"]["type"] for e in events if e["type"] == "content_block_delta"]
    assert deltas == ["thinking_delta", "signature_delta"]
