"""Sub-agents: nested runs with their own history and tools, task states on the parent's stream,
nested budgets, concurrency, killing one, a parent abort, bubbled permissions, metrics."""

from __future__ import annotations

import asyncio

import pytest

import loop
from gateway.loop_metrics import LoopMetrics
from loop.events import TaskState, TaskUpdate, ToolFinished
from loop.subagents import AgentDefinition, SubagentConfig, SubagentPool
from loop.testing import FakeModel, FakeResponse, FakeTool, VirtualClock, text, tool_use
from loop.tools import PermissionMode, PermissionPolicy
from loop.tools.permissions import PermissionRequest, PermissionVerdict
from loop.transitions import AbortedStreaming, AbortedTools, Completed, Guardrail, GuardrailKind
from tests.loop.subagent_support import PARENT, Routed, agent_call, live_tasks, subagent_run
from tests.loop.support import of_type, pairing_violations, run_to_end

USAGE = {"input_tokens": 2_000, "output_tokens": 500}  # 2,500 billed per child call


def states(events: list[loop.LoopEvent], task_id: str) -> list[TaskState]:
    return [e.state for e in of_type(events, TaskUpdate) if e.task_id == task_id]


async def test_a_child_answers_the_parent_through_the_agent_tool() -> None:
    run, model = subagent_run(
        [FakeResponse.of(agent_call("count the files")), FakeResponse.of(text("There are 3."))],
        {"count the files": [FakeResponse.of(tool_use("ls", {})), FakeResponse.of(text("3 files"))]},
        child_tools=[FakeTool("ls", result="a b c")],
    )
    events = await run_to_end(run)
    assert run.terminal == Completed("end_turn")
    assert states(events, "agent_1") == [TaskState.PENDING, TaskState.RUNNING, TaskState.COMPLETED]
    final = of_type(events, TaskUpdate)[-1]
    assert final.terminal == Completed("end_turn") and final.result == "3 files"
    (result,) = [e.result for e in of_type(events, ToolFinished) if e.name == "agent"]
    assert result["content"] == "3 files" and "is_error" not in result
    child_bodies = [b for b in model.bodies if b["messages"][0]["content"][0]["text"] == "count the files"]
    assert len(child_bodies) == 2
    assert child_bodies[0]["system"][0]["text"] == "You are a worker."
    child_tools = [t["name"] for t in child_bodies[0]["tools"]]
    assert "ls" in child_tools and "agent" not in child_tools  # its own tools, no agent tool
    assert "agent" in [t["name"] for t in model.bodies[0]["tools"]]
    assert run.state.usage.billed == sum(r.usage.billed for r in [final] if r.usage is not None) + sum(
        e.usage.billed for e in of_type(events, loop.AssistantMessage)
    )


async def test_nested_budget_a_child_that_would_overspend_is_stopped_and_the_parent_completes() -> None:
    parent_usage = {"input_tokens": 1_000, "output_tokens": 100}
    child = FakeModel([], then=FakeResponse.of(tool_use("ls", {}), usage=USAGE))  # would go on forever
    run, _ = subagent_run(
        [
            FakeResponse.of(agent_call("work forever"), usage=parent_usage),
            FakeResponse.of(text("The worker ran out of budget; done."), usage=parent_usage),
        ],
        {"work forever": child},
        child_tools=[FakeTool("ls")],
        max_total_tokens=10_000,
    )
    events = await run_to_end(run)
    assert run.terminal == Completed("end_turn")
    # allowance: half of what the parent had left (10,000 - 1,100) = 4,450: two calls (5,000)
    assert child.calls() == 2
    final = of_type(events, TaskUpdate)[-1]
    assert final.state is TaskState.FAILED
    assert isinstance(final.terminal, Guardrail) and final.terminal.kind is GuardrailKind.TOKENS
    assert final.terminal.report.limit == 4_450
    (result,) = [e.result for e in of_type(events, ToolFinished) if e.name == "agent"]
    assert result["is_error"] is True and "guardrail" in result["content"]
    # the child's spend is the parent's: 2 x 1,100 + 2 x 2,500, within the parent's 10,000
    assert run.state.usage.billed == 7_200


async def test_a_spent_parent_budget_starts_no_child() -> None:
    child = FakeModel([])
    run, _ = subagent_run(
        [
            FakeResponse.of(agent_call("anything"), usage={"input_tokens": 9_999, "output_tokens": 0}),
            FakeResponse.of(text("ok")),
        ],
        {"anything": child},
        max_total_tokens=10_000,
    )
    events = await run_to_end(run)
    assert child.calls() == 0
    assert states(events, "agent_1") == [TaskState.PENDING, TaskState.FAILED]
    assert run.terminal == Completed("end_turn")


async def test_three_children_run_concurrently_one_is_killed_the_other_two_complete() -> None:
    clock = VirtualClock()
    slow = FakeTool("work", result="worked", duration_s=10.0)
    children = {
        f"part {n}": [FakeResponse.of(tool_use("work", {"part": n})), FakeResponse.of(text(f"part {n} done"))]
        for n in (1, 2, 3)
    }
    run, _ = subagent_run(
        [
            FakeResponse.of(agent_call("part 1"), agent_call("part 2"), agent_call("part 3")),
            FakeResponse.of(text("two of three")),
        ],
        children,
        child_tools=[slow],
        clock=clock,
    )
    events: list[loop.LoopEvent] = []
    async for event in run:
        events.append(event)
        if isinstance(event, TaskUpdate) and event.task_id == "agent_2" and event.state is TaskState.RUNNING:
            assert event.handle.kill()
    assert run.terminal == Completed("end_turn")
    assert states(events, "agent_1") == [TaskState.PENDING, TaskState.RUNNING, TaskState.COMPLETED]
    assert states(events, "agent_2") == [TaskState.PENDING, TaskState.RUNNING, TaskState.KILLED]
    assert states(events, "agent_3") == [TaskState.PENDING, TaskState.RUNNING, TaskState.COMPLETED]
    assert sorted(c.input["part"] for c in slow.calls) == [1, 3]
    assert [c.started_at for c in slow.calls] == [0.0, 0.0]  # side by side
    assert clock.now() == 10.0
    results = {e.tool_use_id: e.result for e in of_type(events, ToolFinished) if e.name == "agent"}
    assert results["toolu_fake_1_0"]["content"] == "part 1 done"
    assert results["toolu_fake_1_1"]["is_error"] is True and "stopped" in results["toolu_fake_1_1"]["content"]
    assert results["toolu_fake_1_2"]["content"] == "part 3 done"
    assert pairing_violations(run.messages) == []
    assert live_tasks() == []


async def test_max_concurrent_keeps_the_others_pending() -> None:
    clock = VirtualClock()
    slow = FakeTool("work", duration_s=10.0)
    children = {
        f"p{n}": [FakeResponse.of(tool_use("work", {})), FakeResponse.of(text("ok"))] for n in (1, 2, 3)
    }
    run, _ = subagent_run(
        [FakeResponse.of(*(agent_call(p) for p in children)), FakeResponse.of(text("done"))],
        children,
        child_tools=[slow],
        clock=clock,
        max_concurrent=2,
    )
    await run.wait()
    assert sorted(c.started_at for c in slow.calls) == [0.0, 0.0, 10.0]
    assert clock.now() == 20.0


async def test_a_parent_abort_kills_every_child_and_leaves_nothing_running() -> None:
    clock = VirtualClock()
    slow = FakeTool("work", duration_s=1_000.0)
    children = {
        f"p{n}": [FakeResponse.of(tool_use("work", {})), FakeResponse.of(text("ok"))] for n in (1, 2, 3)
    }
    run, _ = subagent_run(
        [FakeResponse.of(*(agent_call(p) for p in children)), FakeResponse.of(text("done"))],
        children,
        child_tools=[slow],
        clock=clock,
    )
    handles = []
    async for event in run:
        if isinstance(event, TaskUpdate) and event.state is TaskState.RUNNING:
            handles.append(event.handle)
            if len(handles) == 3:
                break
    await asyncio.sleep(0)  # the children's tools start sleeping on the virtual clock
    await run.aclose()
    assert isinstance(run.terminal, AbortedTools)
    assert [h.state for h in handles] == [TaskState.KILLED] * 3  # type: ignore[attr-defined]
    for handle in handles:
        child = handle.run  # type: ignore[attr-defined]
        assert isinstance(child.terminal, AbortedStreaming | AbortedTools)
        assert pairing_violations(child.messages) == []
    assert live_tasks() == []
    assert clock.pending_timers() == 0  # no sleeper left on the clock...
    assert clock.now() < 1_000.0  # ...and none slept through its 1,000 s
    assert pairing_violations(run.messages) == []


async def test_a_child_cannot_outlive_the_parent_deadline() -> None:
    clock = VirtualClock()
    slow = FakeTool("work", duration_s=500.0)
    run, _ = subagent_run(
        [FakeResponse.of(agent_call("long")), FakeResponse.of(text("never"))],
        {"long": [FakeResponse.of(tool_use("work", {})), FakeResponse.of(text("late"))]},
        child_tools=[slow],
        clock=clock,
        max_wall_clock_s=60.0,
    )
    events = await run_to_end(run)
    final = of_type(events, TaskUpdate)[-1]
    assert final.state is TaskState.FAILED
    assert isinstance(final.terminal, Guardrail) and final.terminal.kind is GuardrailKind.WALL_CLOCK
    assert clock.now() == 60.0
    assert isinstance(run.terminal, Guardrail) and run.terminal.kind is GuardrailKind.WALL_CLOCK
    assert live_tasks() == []


@pytest.mark.parametrize("allowed", [True, False])
async def test_permission_questions_bubble_to_the_parent(allowed: bool) -> None:
    asked: list[PermissionRequest] = []

    async def parent_callback(request: PermissionRequest) -> PermissionVerdict:
        asked.append(request)
        return PermissionVerdict(allowed, "the parent said so")

    edit = FakeTool("edit", read_only=False, result="edited")
    run, _ = subagent_run(
        [FakeResponse.of(agent_call("fix it")), FakeResponse.of(text("done"))],
        {"fix it": [FakeResponse.of(tool_use("edit", {"path": "a"})), FakeResponse.of(text("tried"))]},
        child_tools=[edit],
        permissions=PermissionPolicy(mode=PermissionMode.DEFAULT),
        can_use_tool=parent_callback,
    )
    await run.wait()
    assert [r.tool_name for r in asked] == ["edit"]
    assert len(edit.calls) == (1 if allowed else 0)


async def test_subagent_runs_are_marked_and_named() -> None:
    run, model = subagent_run(
        [FakeResponse.of(agent_call("x")), FakeResponse.of(text("done"))], {"x": [FakeResponse.of(text("y"))]}
    )
    events = await run_to_end(run)
    child = of_type(events, TaskUpdate)[-1].handle.run  # type: ignore[attr-defined]
    assert child.state.transitions == ()
    routes = model.routes
    (request,) = routes["x"].requests
    assert request.source == "agent:worker"
    assert routes[PARENT].requests[0].source == "sdk"


async def test_metrics_count_subagents_by_outcome() -> None:
    metrics = LoopMetrics()
    metrics.prime()
    run, _ = subagent_run(
        [
            FakeResponse.of(agent_call("a"), agent_call("b", subagent_type="nobody")),
            FakeResponse.of(text("done")),
        ],
        {"a": [FakeResponse.of(text("fine"))]},
    )
    run._observers = (metrics,)  # the observer a QueryParams(observers=...) would set
    await run.wait()
    value = metrics.registry.get_sample_value
    assert value("loop_subagents_total", {"outcome": "completed"}) == 1
    assert value("loop_subagents_total", {"outcome": "failed"}) == 0  # an unknown type starts nothing
    assert value("loop_subagents_total", {"outcome": "killed"}) == 0


async def test_the_python_api_runs_children_without_a_parent_run() -> None:
    clock = VirtualClock()
    updates: list[TaskUpdate] = []
    routes = {p: FakeModel([FakeResponse.of(text(f"{p}: done"))], clock=clock) for p in ("one", "two")}
    pool = SubagentPool.create(
        SubagentConfig(agents=[AgentDefinition("helper", "Helps.")]),
        loop_config=loop.LoopConfig(),
        deps=loop.LoopDeps(call_model=Routed(routes), clock=clock),
        sink=updates.append,
        run_query=loop.query,
    )
    tasks = [pool.spawn(p) for p in ("one", "two")]
    results = [await pool.wait(t) for t in tasks]
    assert [r.text for r in results] == ["one: done", "two: done"]
    assert [r.state for r in results] == [TaskState.COMPLETED] * 2
    assert [u.state for u in updates if u.task_id == "agent_1"] == [
        TaskState.PENDING,
        TaskState.RUNNING,
        TaskState.COMPLETED,
    ]
    assert pool.budget.take_spent().billed == sum(r.usage.billed for r in results)
    await pool.aclose()
    assert live_tasks() == []
