"""The run object: lazy start, backpressure, aborts by aclose and by cancellation."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import loop
from loop.events import StreamEvent, ToolStarted
from loop.messages import INTERRUPTED_RESULT_TEXT, INTERRUPTION_MESSAGE, INTERRUPTION_TOOLS_MESSAGE
from loop.request import ModelRequest
from loop.testing import FakeModel, FakeResponse, FakeTool, VirtualClock, text, tool_use
from loop.tools.base import Tool, ToolContext
from loop.tools.permissions import PermissionMode, PermissionPolicy
from loop.transitions import AbortedStreaming, AbortedTools, Completed, ModelError
from tests.loop.support import fake_run, pairing_violations


class Blocking(Tool[Any]):
    """A tool that never finishes on its own; records that it was cancelled."""

    description = "blocks"

    def __init__(self, name: str, *, read_only: bool = False) -> None:
        from loop.testing import AnyInput

        self.name = name
        self.input_model = AnyInput
        self.read_only = read_only
        self.started = asyncio.Event()
        self.cancelled = False

    async def call(self, tool_input: Any, context: ToolContext) -> str:
        self.started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        return "unreachable"


class CountingCaller:
    """Yields a response's events, counting how many it has produced and whether it was closed."""

    def __init__(self, response: FakeResponse) -> None:
        self.response = response
        self.produced = 0
        self.closed = False
        self.calls = 0

    async def __call__(self, request: ModelRequest) -> Any:
        self.calls += 1
        try:
            for event in self.response.events():
                self.produced += 1
                yield event
        finally:
            self.closed = True


def params(caller: Any, tools: list[Tool[Any]] | None = None) -> loop.QueryParams:
    return loop.QueryParams(
        "go",
        tools=tools or [],
        deps=loop.LoopDeps(call_model=caller, clock=VirtualClock()),
        permissions=PermissionPolicy(mode=PermissionMode.BYPASS_PERMISSIONS),
    )


async def test_nothing_happens_before_the_first_pull() -> None:
    caller = CountingCaller(FakeResponse.of(text("hi")))
    run = loop.query(params(caller))
    await asyncio.sleep(0)
    assert caller.calls == 0 and not run.finished
    with pytest.raises(RuntimeError, match="has not finished"):
        _ = run.terminal
    first = await run.__anext__()
    assert isinstance(first, StreamEvent) and caller.calls == 1
    await run.aclose()


async def test_the_default_caller_is_built_lazily_from_the_environment() -> None:
    # The autouse fixture cleared ANTHROPIC_*: building the run must not touch the provider;
    # the first pull builds it and the upstream call fails cleanly without a credential.
    run = loop.query(loop.QueryParams("hi", deps=loop.LoopDeps(clock=VirtualClock())))
    await run.wait()
    assert isinstance(run.terminal, ModelError)
    assert (run.terminal.status, run.terminal.error_type) == (503, "api_error")
    assert "no upstream credential" in run.terminal.message


async def test_backpressure_the_loop_never_runs_ahead_of_the_consumer() -> None:
    caller = CountingCaller(FakeResponse.of(text("a fairly long answer, streamed in pieces")))
    run = loop.query(params(caller))
    pulled = 0
    async for event in run:
        if isinstance(event, StreamEvent):
            pulled += 1
            assert caller.produced == pulled
            await asyncio.sleep(0)  # give a would-be background producer every chance
            assert caller.produced == pulled
    assert run.terminal == Completed("end_turn")


async def test_aclose_while_streaming() -> None:
    response = FakeResponse.of(text("Let me "), tool_use("read", {"p": 1}), text("and then"))
    caller = CountingCaller(response)
    run = loop.query(params(caller, [FakeTool("read")]))
    async for event in run:
        if (
            isinstance(event, StreamEvent)
            and event.event["type"] == "content_block_start"
            and event.event["index"] == 2
        ):
            break
    await run.aclose()
    assert run.terminal == AbortedStreaming(turn=1)
    assert caller.closed  # the model stream was closed, not left dangling
    assert pairing_violations(run.messages) == []
    assert run.messages[-1]["content"][0]["content"] == INTERRUPTED_RESULT_TEXT


async def test_async_with_aborts_on_exit_and_aclose_after_the_end_changes_nothing() -> None:
    caller = CountingCaller(FakeResponse.of(text("hi")))
    async with loop.query(params(caller)) as run:
        async for _ in run:
            break
    assert isinstance(run.terminal, AbortedStreaming)

    finished, _ = fake_run([FakeResponse.of(text("hi"))])
    await finished.wait()
    await finished.aclose()
    assert finished.terminal == Completed("end_turn")


async def test_aclose_before_the_first_pull() -> None:
    caller = CountingCaller(FakeResponse.of(text("hi")))
    run = loop.query(params(caller))
    await run.aclose()
    assert run.terminal == AbortedStreaming(turn=0)
    assert run.messages == [{"role": "user", "content": [{"type": "text", "text": "go"}]}]
    assert caller.calls == 0
    assert [e async for e in run] == []


async def test_aclose_while_tools_run() -> None:
    blocking = Blocking("edit")
    model = FakeModel([FakeResponse.of(tool_use("edit", {"x": 1}))])
    run = loop.query(params(model, [blocking]))
    async for event in run:
        if isinstance(event, ToolStarted):
            break
    await run.aclose()
    assert run.terminal == AbortedTools(turn=1, interrupted_tool_use_ids=("toolu_fake_1_0",))
    assert blocking.cancelled
    assert pairing_violations(run.messages) == []


async def test_cancelling_the_consumer_during_tools_keeps_finished_results() -> None:
    fast = FakeTool("fast", result="fast result")
    slow = Blocking("slow", read_only=True)
    model = FakeModel([FakeResponse.of(tool_use("fast", {}), tool_use("slow", {}))])
    run = loop.query(params(model, [fast, slow]))
    consumer = asyncio.create_task(run.wait())
    await slow.started.wait()
    consumer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await consumer
    assert run.terminal == AbortedTools(turn=1, interrupted_tool_use_ids=("toolu_fake_1_1",))
    assert slow.cancelled
    results = run.messages[-1]["content"]
    assert results[0] == {"type": "tool_result", "tool_use_id": "toolu_fake_1_0", "content": "fast result"}
    assert results[1]["is_error"] is True and results[1]["content"] == INTERRUPTED_RESULT_TEXT


def _hanging_after_one_event(gate: asyncio.Event) -> Any:
    """A model caller that streams one event, sets ``gate`` and then never sends another."""

    async def hanging(request: ModelRequest) -> Any:
        yield FakeResponse.of(text("x")).events()[0]
        gate.set()
        await asyncio.Event().wait()
        yield {}  # pragma: no cover

    return hanging


async def test_cancelling_the_consumer_while_the_model_streams() -> None:
    gate = asyncio.Event()
    run = loop.query(params(_hanging_after_one_event(gate)))
    consumer = asyncio.create_task(run.wait())
    await gate.wait()
    consumer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await consumer
    assert run.terminal == AbortedStreaming(turn=1)
    assert run.messages == [
        {"role": "user", "content": [{"type": "text", "text": "go"}]},
        {"role": "user", "content": [{"type": "text", "text": INTERRUPTION_MESSAGE}]},  # a hard abort
    ]


async def test_aclose_from_another_task_while_tools_run_is_the_hard_abort() -> None:
    # A stop button: aclose() raised "asynchronous generator is already running" and the run
    # went on to complete.
    fast = FakeTool("fast", result="fast result")
    slow = Blocking("slow", read_only=True)
    model = FakeModel([FakeResponse.of(tool_use("fast", {}), tool_use("slow", {}))], then=FakeResponse.of(text("no")))
    run = loop.query(params(model, [fast, slow]))
    consumer = asyncio.create_task(run.wait())
    await slow.started.wait()
    await run.aclose()
    assert run.terminal == AbortedTools(turn=1, interrupted_tool_use_ids=("toolu_fake_1_1",))
    assert await consumer == run.terminal  # its iteration ended, it was not cancelled
    assert slow.cancelled and model.calls() == 1
    last = run.messages[-1]["content"]
    assert last[0] == {"type": "tool_result", "tool_use_id": "toolu_fake_1_0", "content": "fast result"}
    assert last[1]["is_error"] is True and last[1]["content"] == INTERRUPTED_RESULT_TEXT
    assert last[2] == {"type": "text", "text": INTERRUPTION_TOOLS_MESSAGE}
    assert pairing_violations(run.messages) == []
    await run.aclose()  # again: nothing changes
    assert [e async for e in run] == []


async def test_aclose_from_another_task_while_the_model_streams() -> None:
    gate = asyncio.Event()
    run = loop.query(params(_hanging_after_one_event(gate)))
    consumer = asyncio.create_task(run.wait())
    await gate.wait()
    await run.aclose()
    assert await consumer == AbortedStreaming(turn=1)
    assert run.messages == [
        {"role": "user", "content": [{"type": "text", "text": "go"}]},
        {"role": "user", "content": [{"type": "text", "text": INTERRUPTION_MESSAGE}]},
    ]
