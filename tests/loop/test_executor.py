"""The streaming executor: safe calls start while the response streams, state-changing calls wait
for its end and run one at a time, results come back in call order in one message."""

from __future__ import annotations

from loop.events import StreamEvent, ToolFinished, ToolResults, ToolStarted
from loop.testing import FakeResponse, FakeTool, VirtualClock, text, tool_use
from tests.loop.support import fake_run, of_type, run_to_end


def position(events: list[object], predicate: object) -> int:
    return next(i for i, e in enumerate(events) if predicate(e))  # type: ignore[operator]


def is_message_stop(event: object) -> bool:
    return isinstance(event, StreamEvent) and event.event["type"] == "message_stop"


async def test_a_safe_call_starts_before_the_response_ends() -> None:
    clock = VirtualClock()
    reader = FakeTool("read", duration_s=1)
    run, _ = fake_run(
        [
            FakeResponse.of(tool_use("read", {"path": "a"}), text("I am still talking while it runs " * 3)),
            FakeResponse.of(text("done")),
        ],
        tools=[reader],
        clock=clock,
        event_delay_s=0.5,
    )
    events = await run_to_end(run)
    started = position(events, lambda e: isinstance(e, ToolStarted))
    finished = position(events, lambda e: isinstance(e, ToolFinished))
    assert started < finished < position(events, is_message_stop)  # ran entirely inside the stream
    response_end = 0.5 * len(
        FakeResponse.of(
            tool_use("read", {"path": "a"}), text("I am still talking while it runs " * 3)
        ).events()
    )
    assert reader.calls[0].started_at < reader.calls[0].finished_at < response_end


async def test_state_changing_calls_wait_for_the_end_and_run_serially_in_order() -> None:
    clock = VirtualClock()
    edit_a = FakeTool("edit_a", read_only=False, duration_s=2)
    edit_b = FakeTool("edit_b", read_only=False, duration_s=2)
    script = [
        FakeResponse.of(tool_use("edit_a", {}), tool_use("edit_b", {}), text("two edits")),
        FakeResponse.of(text("done")),
    ]
    run, _ = fake_run(script, tools=[edit_a, edit_b], clock=clock, event_delay_s=0.5)
    events = await run_to_end(run)
    end = position(events, is_message_stop)
    assert all(events.index(e) > end for e in of_type(events, ToolStarted))
    response_end = 0.5 * len(script[0].events())
    assert edit_a.calls[0].started_at == response_end
    assert edit_b.calls[0].started_at == edit_a.calls[0].finished_at == response_end + 2


async def test_a_safe_call_after_a_state_changing_one_waits_for_it() -> None:
    clock = VirtualClock()
    edit = FakeTool("edit", read_only=False, duration_s=3)
    read = FakeTool("read", duration_s=1)
    script = [FakeResponse.of(tool_use("edit", {}), tool_use("read", {})), FakeResponse.of(text("done"))]
    run, _ = fake_run(script, tools=[edit, read], clock=clock, event_delay_s=0.5)
    await run.wait()
    assert read.calls[0].started_at == edit.calls[0].finished_at


async def test_safe_calls_run_concurrently_up_to_the_cap() -> None:
    clock = VirtualClock()
    reader = FakeTool("read", duration_s=10)
    script = [FakeResponse.of(*(tool_use("read", {"n": i}) for i in range(5))), FakeResponse.of(text("done"))]
    run, _ = fake_run(script, tools=[reader], clock=clock, max_tool_concurrency=2)
    await run.wait()
    starts = sorted(call.started_at for call in reader.calls)
    assert starts == [0, 0, 10, 10, 20]
    assert clock.now() == 30


async def test_results_come_back_in_call_order_in_one_message_whatever_the_finishing_order() -> None:
    clock = VirtualClock()
    slow = FakeTool("slow", result="slow result", duration_s=9)
    fast = FakeTool("fast", result="fast result", duration_s=1)
    script = [
        FakeResponse.of(text("both"), tool_use("slow", {}), tool_use("fast", {})),
        FakeResponse.of(text("ok")),
    ]
    run, model = fake_run(script, tools=[slow, fast], clock=clock)
    events = await run_to_end(run)
    assert [e.name for e in of_type(events, ToolFinished)] == ["fast", "slow"]
    (results,) = of_type(events, ToolResults)
    assert [b["content"] for b in results.message["content"]] == ["slow result", "fast result"]
    sent = model.requests[1].body["messages"]
    assert sent[-2]["role"] == "assistant" and sent[-1]["role"] == "user"
    assert [b["type"] for b in sent[-1]["content"]] == ["tool_result", "tool_result"]


async def test_concurrency_safety_can_depend_on_the_input() -> None:
    class ShellLike(FakeTool):
        def is_concurrency_safe(self, tool_input: object) -> bool:
            return getattr(tool_input, "command", "") == "ls"

    clock = VirtualClock()
    shell = ShellLike("shell", read_only=False, duration_s=1)
    script = [
        FakeResponse.of(
            tool_use("shell", {"command": "ls"}), tool_use("shell", {"command": "rm x"}), text("...")
        ),
        FakeResponse.of(text("done")),
    ]
    run, _ = fake_run(script, tools=[shell], clock=clock, event_delay_s=0.5)
    await run.wait()
    response_end = 0.5 * len(script[0].events())
    ls, rm = shell.calls
    assert ls.started_at < response_end <= rm.started_at
