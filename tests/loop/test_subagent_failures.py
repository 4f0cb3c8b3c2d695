"""Sub-agents that go wrong: a child whose run raises fails alone, as a failed task with an error
result, and the parent goes on (and its budget gets the child's reservation back)."""

from __future__ import annotations

import loop
from loop.events import TaskState, TaskUpdate, ToolFinished
from loop.testing import FakeResponse, FakeTool, text
from loop.transitions import ModelError
from tests.loop.subagent_support import agent_call, live_tasks, subagent_run
from tests.loop.support import of_type, run_to_end


async def test_a_child_whose_run_raises_fails_alone_and_the_parent_completes() -> None:
    # two tools of one name: the child's run raises ValueError as it starts
    twins = [FakeTool("ls", result="a"), FakeTool("ls", result="b")]
    run, _ = subagent_run(
        [FakeResponse.of(agent_call("one"), agent_call("two")), FakeResponse.of(text("both failed; done"))],
        {"one": [FakeResponse.of(text("never"))], "two": [FakeResponse.of(text("never"))]},
        child_tools=twins,
        max_total_tokens=100_000,
    )
    events = await run_to_end(run)
    assert run.terminal == loop.Completed("end_turn")
    finals = [e for e in of_type(events, TaskUpdate) if e.state.final]
    assert [e.state for e in finals] == [TaskState.FAILED, TaskState.FAILED]
    assert all(isinstance(e.terminal, ModelError) and "two tools are named" in e.terminal.message for e in finals)
    results = [e.result for e in of_type(events, ToolFinished) if e.name == "agent"]
    assert len(results) == 2 and all(r.get("is_error") is True and "failed" in r["content"] for r in results)
    handle = finals[0].handle
    assert handle.result is not None and handle.result.state is TaskState.FAILED
    assert live_tasks() == []
