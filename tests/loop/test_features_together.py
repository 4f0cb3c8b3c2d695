"""Issue 16's three parts in one run: the token budget and hooks, sub-agents and the sticky model
fallback, the Session. Each test crosses two of them, where their rules meet."""

from __future__ import annotations

from pathlib import Path

import loop
from loop.hooks import AgentHook, HookMatcher, HookSettings
from loop.subagents import AgentDefinition, SubagentConfig
from loop.testing import FakeModel, FakeResponse, FakeTool, VirtualClock, text
from loop.transitions import Completed, ModelFallback, TokenBudgetContinuation
from tests.loop.subagent_support import PARENT, agent_call, subagent_run

PRIMARY, FALLBACK = "claude-sonnet-4-6", "claude-haiku-4-5"


def sized(output_tokens: int, *blocks: dict[str, object]) -> FakeResponse:
    return FakeResponse.of(*blocks, usage={"input_tokens": 10, "output_tokens": output_tokens})


def overloaded() -> FakeResponse:
    return FakeResponse.http_error(529, "overloaded_error", "Overloaded")


async def test_a_child_never_continues_on_the_parents_token_budget() -> None:
    run, model = subagent_run(
        [sized(100, agent_call("summarise")), sized(100, text("half done")), sized(900, text("done"))],
        {"summarise": [sized(10, text("summary")), sized(10, text("a second answer nobody asked for"))]},
        token_budget=1_000,
        task_budget_upstream=True,
    )
    assert await run.wait() == Completed("end_turn")
    continued = [t for t in run.state.transitions if isinstance(t, TokenBudgetContinuation)]
    assert continued == [TokenBudgetContinuation(200, 1_000, 1)]  # the parent's, on its own output
    children = [b for b in model.bodies if b["messages"][0]["content"][0]["text"] == "summarise"]
    assert len(children) == 1  # the child completed on its first end_turn
    assert "output_config" not in children[0]  # nor is the parent's budget sent for the child
    parents = [b for b in model.bodies if b["messages"][0]["content"][0]["text"] == PARENT]
    assert all(b["output_config"]["task_budget"]["total"] == 1_000 for b in parents)


async def test_an_agent_judge_gets_the_read_only_tools_but_never_the_agent_tool() -> None:
    clock = VirtualClock()
    model = FakeModel([FakeResponse.of(text("done")), FakeResponse.of(text('{"ok": true}'))], clock=clock)
    look = FakeTool("look")
    agents = SubagentConfig(agents=[AgentDefinition("worker", "Does work.", tools=[look])])
    hooks = HookSettings.of({"Stop": [HookMatcher(None, (AgentHook("Is it done?"),))]})
    run = loop.query(
        loop.QueryParams(
            messages="go",
            tools=[look],
            config=loop.LoopConfig(model=PRIMARY),
            deps=loop.LoopDeps(call_model=model, clock=clock),
            subagents=agents,
            hooks=hooks,
        )
    )
    assert await run.wait() == Completed("end_turn")
    first, judge = model.requests
    assert {t["name"] for t in first.body["tools"]} >= {"look", "agent"}
    judge_tools = {t["name"] for t in judge.body["tools"]}
    assert "look" in judge_tools and "agent" not in judge_tools  # a judge starts no sub-agents
    assert judge.source == "agent:hook-judge" and judge.body["model"] == PRIMARY


async def test_after_a_fallback_the_agent_judge_runs_on_the_fallback_model() -> None:
    clock = VirtualClock()
    model = FakeModel(
        [overloaded(), FakeResponse.of(text("done")), FakeResponse.of(text('{"ok": true}'))], clock=clock
    )
    hooks = HookSettings.of({"Stop": [HookMatcher(None, (AgentHook("Is it done?"),))]})
    config = loop.LoopConfig(model=PRIMARY, fallback_model=FALLBACK, fallback_after_overloads=1)
    run = loop.query(
        loop.QueryParams("go", config=config, deps=loop.LoopDeps(call_model=model, clock=clock), hooks=hooks)
    )
    assert await run.wait() == Completed("end_turn")
    assert run.state.transitions == (ModelFallback(PRIMARY, FALLBACK),)
    assert [r.body["model"] for r in model.requests] == [PRIMARY, FALLBACK, FALLBACK]
    assert model.requests[2].source == "agent:hook-judge"


async def test_a_session_stays_on_the_fallback_model_across_runs_and_a_resume(tmp_path: Path) -> None:
    clock = VirtualClock()
    model = FakeModel(
        [overloaded(), FakeResponse.of(text("first")), FakeResponse.of(text("second"))], clock=clock
    )
    deps = loop.LoopDeps(call_model=model, clock=clock)
    config = loop.LoopConfig(model=PRIMARY, fallback_model=FALLBACK, fallback_after_overloads=1)
    session = loop.Session(config=config, deps=deps)
    assert await session.query("one").wait() == Completed("end_turn")
    assert session.model == FALLBACK
    session.save(tmp_path / "chat.json")
    resumed = loop.Session.load(tmp_path / "chat.json", config=config, deps=deps)
    assert resumed.model == FALLBACK
    assert await resumed.query("two").wait() == Completed("end_turn")
    assert [r.body["model"] for r in model.requests] == [PRIMARY, FALLBACK, FALLBACK]
    fresh = loop.Session(config=config, deps=deps)  # a new conversation starts on the primary
    assert fresh.model is None
