"""The cost guardrail (``LoopConfig.max_cost_usd``): responses priced with the gateway's price table
for the model they came from and the caller's upstream, a run stopped once its spend reaches the
limit, and sub-agents drawing from the parent's remaining cost budget.

Prices used (``gateway/pricing.py``, USD per million tokens): Sonnet 4.6 $3 in / $15 out (cache
write 1.25x, cache read 0.1x the input price), Haiku 4.5 $1 / $5, Opus 4.1 $15 / $75.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

import loop
from gateway.pricing import parse_price_table
from loop.events import TaskState, TaskUpdate, ToolFinished
from loop.guardrails import check_guardrails
from loop.messages import user_message
from loop.state import LoopState
from loop.subagents import AgentDefinition, SubagentConfig
from loop.testing import FakeModel, FakeResponse, FakeTool, VirtualClock, text, tool_use
from loop.transitions import Completed, Guardrail, GuardrailKind
from loop.usage import TokenUsage
from tests.loop.subagent_support import PARENT, Routed, agent_call
from tests.loop.support import of_type, run_to_end

M = 1e-6
PARENT_USAGE = {"input_tokens": 1_000, "output_tokens": 100}  # Sonnet 4.6: $0.0045
CHILD_USAGE = {"input_tokens": 2_000, "output_tokens": 500}  # Sonnet 4.6: $0.0135


def test_the_cost_guardrail_comes_after_tokens_and_before_the_wall_clock() -> None:
    config = loop.LoopConfig(max_cost_usd=0.5, max_total_tokens=100, max_wall_clock_s=10.0)
    prompt = (user_message("go"),)
    spent = TokenUsage(input_tokens=10, cost_usd=0.5)
    result = check_guardrails(LoopState(prompt, 0.0, usage=spent), config, now=20.0)
    assert isinstance(result, Guardrail) and result.kind is GuardrailKind.COST
    assert (result.report.limit, result.report.observed) == (0.5, 0.5)
    over_tokens = TokenUsage(input_tokens=100, cost_usd=0.5)
    result = check_guardrails(LoopState(prompt, 0.0, usage=over_tokens), config, now=20.0)
    assert isinstance(result, Guardrail) and result.kind is GuardrailKind.TOKENS
    under = TokenUsage(input_tokens=10, cost_usd=0.4999)
    result = check_guardrails(LoopState(prompt, 0.0, usage=under), config, now=20.0)
    assert isinstance(result, Guardrail) and result.kind is GuardrailKind.WALL_CLOCK
    assert check_guardrails(LoopState(prompt, 0.0, usage=under), config, now=5.0) is None
    with pytest.raises(ValueError, match="max_cost_usd"):
        loop.LoopConfig(max_cost_usd=0)


async def test_a_run_stops_once_its_spend_reaches_the_limit() -> None:
    looping = FakeResponse.of(tool_use("ls", {}), usage=PARENT_USAGE)
    model = FakeModel([], then=looping)
    params = loop.QueryParams(
        "go",
        tools=[FakeTool("ls")],
        config=loop.LoopConfig(max_cost_usd=0.02),
        deps=loop.LoopDeps(call_model=model),
        permissions=loop.tools.PermissionPolicy(mode=loop.tools.PermissionMode.DONT_ASK),
    )
    run = loop.query(params)
    await run.wait()
    # $0.0045 a call: the fifth call reaches $0.0225 >= $0.02, the sixth is never sent
    assert model.calls() == 5
    assert isinstance(run.terminal, Guardrail) and run.terminal.kind is GuardrailKind.COST
    assert run.terminal.report.observed == pytest.approx(5 * 0.0045)
    assert run.state.usage.cost_usd == pytest.approx(5 * 0.0045)


async def test_each_response_is_priced_for_its_model_with_cache_rates() -> None:
    usage = {
        "input_tokens": 1_000,
        "output_tokens": 1_000,
        "cache_read_input_tokens": 10_000,
        "cache_creation_input_tokens": 2_000,
    }
    costs = {}
    for name in ("claude-sonnet-4-6", "claude-haiku-4-5", "claude-opus-4-1"):
        model = FakeModel([FakeResponse.of(text("hi"), usage=usage)])
        run = loop.query(
            loop.QueryParams("hi", config=loop.LoopConfig(model=name), deps=loop.LoopDeps(call_model=model))
        )
        await run.wait()
        costs[name] = run.state.usage.cost_usd
    for name, (inp, out) in {
        "claude-sonnet-4-6": (3, 15),
        "claude-haiku-4-5": (1, 5),
        "claude-opus-4-1": (15, 75),
    }.items():
        expected = (1_000 * inp + 1_000 * out + 10_000 * inp * 0.1 + 2_000 * inp * 1.25) * M
        assert costs[name] == pytest.approx(expected)


@dataclass(frozen=True)
class _Upstream:
    name: str


class _OnBedrock:
    """A caller that says its upstream is Bedrock (as ``ProviderModelCaller.provider`` does)."""

    def __init__(self, model: FakeModel) -> None:
        self.provider = _Upstream("bedrock")
        self._model = model

    def __call__(self, request: Any) -> Any:
        return self._model(request)


async def test_the_price_table_and_the_upstream_come_from_the_deps() -> None:
    table = parse_price_table('{"providers": {"bedrock": {"multiplier": 1.1}}}', "test")
    model = FakeModel([FakeResponse.of(text("hi"), usage=PARENT_USAGE)])
    run = loop.query(loop.QueryParams("hi", deps=loop.LoopDeps(call_model=_OnBedrock(model), prices=table)))
    await run.wait()
    assert run.state.usage.cost_usd == pytest.approx(0.0045 * 1.1)


def _with_children(
    parent: list[FakeResponse], children: dict[str, FakeModel], *, clock: VirtualClock, **config: Any
) -> tuple[loop.Run, Routed]:
    routes = {PARENT: FakeModel(parent, clock=clock), **children}
    caller = Routed(routes)
    agents = SubagentConfig(
        agents=[
            AgentDefinition("worker", "Works.", tools=[FakeTool("ls")]),
            AgentDefinition("cheap", "Works for less.", tools=[FakeTool("ls")], model="claude-haiku-4-5"),
        ]
    )
    params = loop.QueryParams(
        messages=PARENT,
        config=loop.LoopConfig(**config),
        deps=loop.LoopDeps(call_model=caller, clock=clock),
        permissions=loop.tools.PermissionPolicy(mode=loop.tools.PermissionMode.DONT_ASK),
        subagents=agents,
    )
    return loop.query(params), caller


async def test_a_child_that_would_overspend_the_cost_budget_is_stopped_and_the_parent_completes() -> None:
    clock = VirtualClock()
    child = FakeModel([], clock=clock, then=FakeResponse.of(tool_use("ls", {}), usage=CHILD_USAGE))
    run, _ = _with_children(
        [
            FakeResponse.of(agent_call("work forever"), usage=PARENT_USAGE),
            FakeResponse.of(text("The worker ran out of money; done."), usage=PARENT_USAGE),
        ],
        {"work forever": child},
        clock=clock,
        max_cost_usd=0.05,
        max_total_tokens=None,
    )
    events = await run_to_end(run)
    assert run.terminal == Completed("end_turn")
    # allowance: half of what the parent had left ($0.05 - $0.0045) = $0.02275; $0.0135 a call:
    # the second call reaches $0.027, the third is never sent
    assert child.calls() == 2
    final = of_type(events, TaskUpdate)[-1]
    assert final.state is TaskState.FAILED
    assert isinstance(final.terminal, Guardrail) and final.terminal.kind is GuardrailKind.COST
    assert final.terminal.report.limit == pytest.approx(0.02275)
    assert final.usage is not None and final.usage.cost_usd == pytest.approx(0.027)
    (result,) = [e.result for e in of_type(events, ToolFinished) if e.name == "agent"]
    assert result["is_error"] is True and "$0.0270 spent on model calls" in result["content"]
    # the child's spend is the parent's: 2 x $0.0045 + 2 x $0.0135, within the parent's $0.05
    assert run.state.usage.cost_usd == pytest.approx(0.036)


async def test_children_are_priced_for_their_own_model() -> None:
    clock = VirtualClock()
    child = FakeModel([FakeResponse.of(text("cheap answer"), usage=CHILD_USAGE)], clock=clock)
    run, _ = _with_children(
        [
            FakeResponse.of(agent_call("summarise", subagent_type="cheap"), usage=PARENT_USAGE),
            FakeResponse.of(text("done"), usage=PARENT_USAGE),
        ],
        {"summarise": child},
        clock=clock,
    )
    events = await run_to_end(run)
    assert child.requests[0].body["model"] == "claude-haiku-4-5"
    final = of_type(events, TaskUpdate)[-1]
    assert final.usage is not None and final.usage.cost_usd == pytest.approx((2_000 * 1 + 500 * 5) * M)
    assert run.state.usage.cost_usd == pytest.approx(2 * 0.0045 + (2_000 * 1 + 500 * 5) * M)


async def test_a_spent_parent_cost_budget_starts_no_child() -> None:
    clock = VirtualClock()
    child = FakeModel([], clock=clock)
    run, _ = _with_children(
        [
            FakeResponse.of(agent_call("anything"), usage={"input_tokens": 4_000, "output_tokens": 0}),
            FakeResponse.of(text("ok"), usage={"input_tokens": 1, "output_tokens": 1}),
        ],
        {"anything": child},
        clock=clock,
        max_cost_usd=0.009,
    )
    events = await run_to_end(run)
    assert child.calls() == 0
    final = of_type(events, TaskUpdate)[-1]
    assert final.state is TaskState.FAILED
    assert isinstance(final.terminal, Guardrail) and final.terminal.kind is GuardrailKind.COST
    assert isinstance(run.terminal, Guardrail) and run.terminal.kind is GuardrailKind.COST
