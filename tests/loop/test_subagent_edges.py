"""Sub-agents at their edges: a child whose run raises fails alone, as a failed task with an error
result, and the parent goes on; a parent's cache-read cap nests like its token budget; a child
never gets an agent tool, even one its definition lists (a pool of Python code)."""

from __future__ import annotations

import asyncio
from typing import Any

import loop
from loop.events import TaskState, TaskUpdate, ToolFinished
from loop.request import ModelRequest
from loop.subagents import AgentDefinition, SubagentConfig, SubagentPool
from loop.subagents.tool import AgentTool
from loop.testing import FakeModel, FakeResponse, FakeTool, VirtualClock, text, tool_use
from loop.transitions import Guardrail, GuardrailKind, ModelError
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


async def test_children_draw_cache_reads_from_the_parents_cap() -> None:
    reads = {"input_tokens": 10, "output_tokens": 10, "cache_read_input_tokens": 40_000}
    forever = {p: FakeModel([], then=FakeResponse.of(tool_use("ls", {}), usage=reads)) for p in ("a", "b")}
    run, _ = subagent_run(
        [FakeResponse.of(agent_call("a"), agent_call("b"), usage=reads), FakeResponse.of(text("done"))],
        forever,
        child_tools=[FakeTool("ls", result="1")],
        max_cache_read_tokens=100_000,
        max_repeated_tool_calls=None,
    )
    events = await run_to_end(run)
    finals = [e for e in of_type(events, TaskUpdate) if e.state.final]
    assert [e.state for e in finals] == [TaskState.FAILED, TaskState.FAILED]
    limits = []
    for final in finals:
        assert isinstance(final.terminal, Guardrail) and final.terminal.kind is GuardrailKind.CACHE_READ_TOKENS
        limits.append(final.terminal.report.limit)
        assert final.usage is not None and final.usage.cache_read_input_tokens == 40_000  # one call each
    assert limits == [30_000, 15_000]  # half of what was left: 100,000 - 40,000, then less a's reservation
    # the parent stops at its own cap, over it by one call per run (as the token guardrail does)
    assert isinstance(run.terminal, Guardrail) and run.terminal.kind is GuardrailKind.CACHE_READ_TOKENS
    assert run.state.usage.cache_read_input_tokens == 120_000


async def test_a_definition_listing_an_agent_tool_does_not_give_children_one() -> None:
    """Python code sharing one tool list between its run and its agents hands the pool's own agent
    tool to its children: each child started another, until the pool's slots were all held by
    parents waiting for a child that could not start (a hang, or a stall until the deadline)."""
    clock = VirtualClock()
    sent: list[list[str]] = []

    def delegate(request: ModelRequest) -> FakeResponse:
        sent.append([t["name"] for t in request.body.get("tools", [])])
        return FakeResponse.of(agent_call("go deeper"))

    tools: list[Any] = [FakeTool("ls")]
    agents = SubagentConfig(agents=[AgentDefinition("helper", "Helps.", tools=tools)], max_concurrent=2)
    deps = loop.LoopDeps(call_model=FakeModel([], then=delegate, clock=clock), clock=clock)
    pool = SubagentPool.create(agents, loop_config=loop.LoopConfig(), deps=deps, run_query=loop.query)
    tools.append(AgentTool(pool))
    result = await asyncio.wait_for(pool.wait(pool.spawn("go deeper")), timeout=10)
    assert list(pool.tasks) == ["agent_1"]  # no grandchild
    assert all(names == ["ls", "read_tool_result"] for names in sent)
    assert result.state is TaskState.FAILED  # every call it made was to a tool it does not have
    assert live_tasks() == []
