"""Submit-interrupt (``Run.submit``: a new user message mid-run) versus hard abort."""

from __future__ import annotations

import loop
from loop.events import StreamEvent, ToolStarted
from loop.messages import INTERRUPTED_RESULT_TEXT, INTERRUPTION_MESSAGE, INTERRUPTION_TOOLS_MESSAGE
from loop.testing import FakeResponse, FakeTool, VirtualClock, text, tool_use
from loop.transitions import AbortedTools, Completed, NextTurn, SubmitInterrupt
from tests.loop.support import fake_run, pairing_violations

NEW = {"role": "user", "content": [{"type": "text", "text": "actually, do this instead"}]}


def texts(message: dict[str, object]) -> list[str]:
    content = message["content"]
    assert isinstance(content, list)
    return [b["text"] for b in content if b.get("type") == "text"]


async def test_a_message_submitted_while_the_model_streams_stops_the_turn_and_goes_on() -> None:
    clock = VirtualClock()
    run, model = fake_run(
        [
            FakeResponse.of(text("I will start by"), text("reading everything")),
            FakeResponse.of(text("ok, instead")),
        ],
        clock=clock,
        event_delay_s=1.0,
        prompt_caching=False,
    )
    async for event in run:
        if isinstance(event, StreamEvent) and event.event["type"] == "content_block_stop" and event.turn == 1:
            run.submit("actually, do this instead")  # after the first text block
    assert run.terminal == Completed("end_turn")
    assert run.state.transitions == (SubmitInterrupt(1),)
    second = model.requests[1].body["messages"]
    assert second[-2] == {"role": "assistant", "content": [{"type": "text", "text": "I will start by"}]}
    assert second[-1] == NEW  # no interruption message
    assert all(INTERRUPTION_MESSAGE not in texts(m) for m in run.messages)


async def test_a_text_block_cut_by_a_submitted_message_is_kept_as_far_as_it_streamed() -> None:
    # Only finished blocks were kept: the text streaming when the message came was dropped.
    clock = VirtualClock()
    run, model = fake_run(
        [
            FakeResponse.of(text("done"), text("I will start by reading"), tool_use("build", {})),
            FakeResponse.of(text("ok, instead")),
        ],
        clock=clock,
        event_delay_s=1.0,
        prompt_caching=False,
    )
    deltas = 0
    async for event in run:
        if isinstance(event, StreamEvent) and event.turn == 1 and event.event["type"] == "content_block_delta":
            deltas += 1
            if deltas == 3:  # "done", then "I will s" and "tart by " of the second block
                run.submit("actually, do this instead")
    assert run.terminal == Completed("end_turn")
    assert run.state.transitions == (SubmitInterrupt(1),)
    kept = {"role": "assistant", "content": [{"type": "text", "text": "done"}, {"type": "text", "text": "I will start by "}]}
    assert model.requests[1].body["messages"][-2:] == [kept, NEW]
    assert pairing_violations(run.messages) == []


async def test_a_message_submitted_while_tools_run_stops_them_at_once() -> None:
    clock = VirtualClock()
    slow = FakeTool("build", read_only=False, duration_s=100.0)
    fast = FakeTool("read", result="contents")
    run, model = fake_run(
        [FakeResponse.of(tool_use("read", {}), tool_use("build", {})), FakeResponse.of(text("fine"))],
        tools=[fast, slow],
        clock=clock,
        prompt_caching=False,
    )
    async for event in run:
        if isinstance(event, ToolStarted) and event.name == "build":
            run.submit(NEW)
    assert run.terminal == Completed("end_turn")
    assert clock.now() < 100.0 and slow.calls == []  # cancelled, not waited for
    assert run.state.transitions == (SubmitInterrupt(1),)
    sent = model.requests[1].body["messages"]
    results = sent[-2]["content"]
    assert results[0]["content"] == "contents"
    assert results[1]["is_error"] is True and results[1]["content"] == INTERRUPTED_RESULT_TEXT
    assert sent[-1] == NEW
    assert pairing_violations(sent) == []


async def test_a_message_submitted_between_turns_is_appended_before_the_next_call() -> None:
    run, model = fake_run(
        [FakeResponse.of(tool_use("read", {})), FakeResponse.of(text("done"))],
        tools=[FakeTool("read")],
        prompt_caching=False,
    )
    async for event in run:
        if isinstance(event, loop.TransitionEvent):
            run.submit(NEW)
    assert run.state.transitions == (NextTurn(1),)
    assert model.requests[1].body["messages"][-1] == NEW


async def test_a_message_submitted_before_the_start_joins_the_prompt() -> None:
    run, model = fake_run([FakeResponse.of(text("done"))], prompt_caching=False)
    run.submit(NEW)
    await run.wait()
    assert model.requests[0].body["messages"][-1] == NEW


async def test_a_hard_abort_during_tools_ends_with_the_interruption_message() -> None:
    slow = FakeTool("build", read_only=False, duration_s=100.0)
    run, _ = fake_run([FakeResponse.of(tool_use("build", {}))], tools=[slow])
    async for event in run:
        if isinstance(event, ToolStarted):
            break
    await run.aclose()
    assert isinstance(run.terminal, AbortedTools)
    last = run.messages[-1]
    assert last["content"][0]["content"] == INTERRUPTED_RESULT_TEXT
    assert texts(last) == [INTERRUPTION_TOOLS_MESSAGE]
    assert pairing_violations(run.messages) == []


async def test_submit_after_the_end_is_an_error() -> None:
    run, _ = fake_run([FakeResponse.of(text("done"))])
    await run.wait()
    try:
        run.submit("more")
    except RuntimeError:
        return
    raise AssertionError("submit after the end must raise")
