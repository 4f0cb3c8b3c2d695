"""What a stream cut short had already reported is spent: a run aborted mid-stream, a child killed
while its stream is open, and a parent aborted while a child streams all count the usage the
stream reported (``message_start``'s input tokens) in the run's usage and cost, and a child's in
its parent's; so do a summary call and a prompt hook's judge call cut by an abort. Everything runs on the virtual clock: the fake model's events each take 1 s."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

import loop
from loop.events import TaskState, TaskUpdate
from loop.hooks.settings import HookMatcher, HookSettings, PromptHook
from loop.messages import user_message
from loop.request import ModelRequest
from loop.subagents import AgentDefinition, SubagentConfig
from loop.testing import FakeModel, FakeResponse, VirtualClock, text
from loop.transitions import AbortedStreaming, AbortedTools, Completed
from loop.usage import TokenUsage
from tests.loop.subagent_support import PARENT, Routed, agent_call, live_tasks
from tests.loop.support import pairing_violations

PARENT_USAGE = {"input_tokens": 1_000, "output_tokens": 100}
CHILD_USAGE = {"input_tokens": 2_000, "output_tokens": 500}
LONG = "a long answer that streams for many seconds " * 4
M = 1e-6
CHILD_PARTIAL = TokenUsage(input_tokens=2_000, output_tokens=1)  # message_start: input, 1 output
CHILD_PARTIAL_USD = (2_000 * 3 + 1 * 15) * M  # Sonnet 4.6


def assistant_text(value: str) -> dict[str, Any]:
    return {"role": "assistant", "content": [text(value)]}


def _parent_with_slow_child(clock: VirtualClock) -> tuple[loop.Run, FakeModel]:
    child = FakeModel([FakeResponse.of(text(LONG), usage=CHILD_USAGE)], clock=clock, event_delay_s=1.0)
    parent = FakeModel(
        [
            FakeResponse.of(agent_call("slow"), usage=PARENT_USAGE),
            FakeResponse.of(text("done"), usage=PARENT_USAGE),
        ],
        clock=clock,
    )
    params = loop.QueryParams(
        messages=PARENT,
        deps=loop.LoopDeps(call_model=Routed({PARENT: parent, "slow": child}), clock=clock),
        subagents=SubagentConfig(agents=[AgentDefinition("worker", "Works slowly.")]),
    )
    return loop.query(params), child


async def test_a_run_aborted_mid_stream_counts_what_the_stream_reported() -> None:
    clock = VirtualClock()
    model = FakeModel([FakeResponse.of(text(LONG), usage=PARENT_USAGE)], clock=clock, event_delay_s=1.0)
    run = loop.query(loop.QueryParams("go", deps=loop.LoopDeps(call_model=model, clock=clock)))
    consumer = asyncio.create_task(run.wait())
    clock.call_at(2.5, consumer.cancel)  # message_start arrived at t=1, the text block opened at t=2
    with pytest.raises(asyncio.CancelledError):
        await consumer
    assert isinstance(run.terminal, AbortedStreaming)
    assert run.state.usage.tokens() == TokenUsage(input_tokens=1_000, output_tokens=1)
    assert run.state.usage.cost_usd == pytest.approx((1_000 * 3 + 15) * M)
    assert run.state.turn_count == 0  # the response never completed: not a turn


async def test_a_child_killed_mid_stream_charges_its_partial_usage_to_the_parent() -> None:
    clock = VirtualClock()
    run, child = _parent_with_slow_child(clock)
    updates: list[TaskUpdate] = []
    async for event in run:
        if isinstance(event, TaskUpdate):
            updates.append(event)
            if event.state is TaskState.RUNNING:
                clock.call_at(clock.now() + 2.5, event.handle.kill)  # type: ignore[attr-defined]
    assert run.terminal == Completed("end_turn")
    assert [u.state for u in updates] == [TaskState.PENDING, TaskState.RUNNING, TaskState.KILLED]
    killed = updates[-1]
    assert killed.usage is not None and killed.usage.tokens() == CHILD_PARTIAL
    assert isinstance(killed.terminal, AbortedStreaming)
    assert child.requests and clock.now() == 2.5  # killed while its only stream was open
    parent_calls = TokenUsage(input_tokens=2_000, output_tokens=200)
    assert run.state.usage.tokens() == parent_calls + CHILD_PARTIAL
    assert run.state.usage.cost_usd == pytest.approx(2 * (1_000 * 3 + 100 * 15) * M + CHILD_PARTIAL_USD)
    assert pairing_violations(run.messages) == []


async def test_a_parent_aborted_while_a_child_streams_counts_the_childs_partial_usage() -> None:
    clock = VirtualClock()
    run, _ = _parent_with_slow_child(clock)
    consumer = asyncio.create_task(run.wait())
    clock.call_at(2.5, consumer.cancel)
    with contextlib.suppress(asyncio.CancelledError):
        await consumer
    assert isinstance(run.terminal, AbortedTools)
    assert run.state.usage.tokens() == TokenUsage(input_tokens=1_000, output_tokens=100) + CHILD_PARTIAL
    assert run.state.usage.cost_usd == pytest.approx((1_000 * 3 + 100 * 15) * M + CHILD_PARTIAL_USD)
    assert live_tasks() == []
    assert pairing_violations(run.messages) == []


async def test_a_run_aborted_during_a_summary_call_counts_what_it_reported() -> None:
    clock = VirtualClock()

    def answer(request: ModelRequest) -> FakeResponse:
        assert request.source == "compact"  # the run is aborted during its first summary
        return FakeResponse.of(text(LONG), usage={"input_tokens": 30_000, "output_tokens": 400})

    model = FakeModel([], clock=clock, event_delay_s=1.0, then=answer)
    history = []
    for i in range(6):  # ~ 60,000 estimated tokens: above the auto-compact threshold (19,000)
        history += [
            user_message(f"question {i}: " + "q" * 15_000),
            assistant_text(f"answer {i}: " + "a" * 15_000),
        ]
    config = loop.LoopConfig(context_window=40_000, max_tokens=4_000, escalated_max_tokens=8_000)
    run = loop.query(
        loop.QueryParams(
            [*history, user_message("now fix the bug")],
            config=config,
            deps=loop.LoopDeps(call_model=model, clock=clock),
        )
    )
    consumer = asyncio.create_task(run.wait())
    clock.call_at(2.5, consumer.cancel)
    with pytest.raises(asyncio.CancelledError):
        await consumer
    assert model.calls("compact") == 1 and model.calls() == 1
    assert run.state.usage.tokens() == TokenUsage(input_tokens=30_000, output_tokens=1)


async def test_a_run_aborted_during_a_prompt_hook_counts_the_judges_partial_usage() -> None:
    clock = VirtualClock()

    def answer(request: ModelRequest) -> FakeResponse:
        if request.source == "hook":
            return FakeResponse.of(
                text('{"ok": true}' + " " * 200), usage={"input_tokens": 700, "output_tokens": 9}
            )
        return FakeResponse.of(text("done"), usage=PARENT_USAGE)

    model = FakeModel([], then=answer)
    judged = FakeModel([], clock=clock, event_delay_s=1.0, then=answer)

    def route(request: ModelRequest) -> Any:
        return (judged if request.source == "hook" else model)(request)

    hooks = HookSettings.of(
        {"Stop": [HookMatcher(None, (PromptHook("Is the answer complete? $ARGUMENTS"),))]}
    )
    run = loop.query(loop.QueryParams("go", deps=loop.LoopDeps(call_model=route, clock=clock), hooks=hooks))
    consumer = asyncio.create_task(run.wait())
    clock.call_at(2.5, consumer.cancel)
    with pytest.raises(asyncio.CancelledError):
        await consumer
    assert judged.calls() == 1
    # the run's own answer (1,000 in, 100 out) and the judge's cut stream (700 in, 1 out)
    assert run.state.usage.tokens() == TokenUsage(input_tokens=1_700, output_tokens=101)
