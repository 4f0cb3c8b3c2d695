"""The token budget: the ``after_completion`` rows of ``decide`` (table), then whole runs on the
FakeModel with scripted output sizes (exact continuation counts), the nudge, sub-agents, and what
is sent upstream as ``output_config.task_budget`` (``remaining`` after a compaction)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

import loop
from loop.budget import TASK_BUDGET_BETA, BudgetState, check_budget, nudge_message, task_budget
from loop.config import LoopConfig
from loop.context.kinds import Layer
from loop.context.result import LayerResult
from loop.context.settings import ContextSettings, LayerState
from loop.decide import after_completion
from loop.events import ContextBoundary
from loop.messages import blocks_of
from loop.state import LoopState
from loop.stop_hooks import StopHookResult
from loop.testing import FakeModel, FakeResponse, FakeTool, VirtualClock, text, tool_use
from loop.transitions import (
    Completed,
    NextTurn,
    StopHookBlocking,
    StopHookLimit,
    StopHookPrevented,
    TokenBudgetContinuation,
)
from tests.loop.support import pairing_violations

DONE = Completed("end_turn")
BLOCK = StopHookResult(blocking_errors=("lint failed",))
PREVENT = StopHookResult(prevent_continuation=True, message="enough")


def state(*, blocks: int = 0, **budget: int) -> LoopState:
    return LoopState(messages=(), started_at=0.0, stop_hook_blocks=blocks, budget=BudgetState(**budget))


ROWS: list[tuple[str, LoopState, list[StopHookResult], LoopConfig, object]] = [
    ("no hooks, no budget", state(), [], LoopConfig(), DONE),
    ("hooks pass, no budget", state(), [StopHookResult()], LoopConfig(), DONE),
    ("a hook prevents", state(), [PREVENT], LoopConfig(), StopHookPrevented("enough")),
    ("prevent wins over a block", state(), [BLOCK, PREVENT], LoopConfig(), StopHookPrevented("enough")),
    ("first block", state(), [BLOCK], LoopConfig(), StopHookBlocking(("lint failed",))),
    ("third block (cap 3)", state(blocks=2), [BLOCK], LoopConfig(), StopHookBlocking(("lint failed",))),
    ("fourth block ends", state(blocks=3), [BLOCK], LoopConfig(), StopHookLimit(3, ("lint failed",))),
    ("cap 1: second block ends", state(blocks=1), [BLOCK], LoopConfig(max_stop_hook_blocks=1),
     StopHookLimit(1, ("lint failed",))),
    ("hooks come before the budget", state(output_tokens=10), [BLOCK], LoopConfig(token_budget=10_000),
     StopHookBlocking(("lint failed",))),
    ("below 90%: continue", state(output_tokens=1_000), [], LoopConfig(token_budget=10_000),
     TokenBudgetContinuation(1_000, 10_000, 1)),
    ("just below 90%", state(output_tokens=8_999, continuations=2, checked_tokens=4_000, last_delta=2_000), [],
     LoopConfig(token_budget=10_000), TokenBudgetContinuation(8_999, 10_000, 3)),
    ("at 90%: stop", state(output_tokens=9_000), [], LoopConfig(token_budget=10_000), DONE),
    ("over the budget", state(output_tokens=12_000), [], LoopConfig(token_budget=10_000), DONE),
    ("a sub-agent never continues", state(output_tokens=10), [], LoopConfig(token_budget=10_000, subagent=True),
     DONE),
    ("diminishing: 3 continuations, two small deltas",
     state(output_tokens=3_900, continuations=3, checked_tokens=3_600, last_delta=300), [],
     LoopConfig(token_budget=100_000), DONE),
    ("small now, previous 500: go on",
     state(output_tokens=3_900, continuations=3, checked_tokens=3_600, last_delta=500), [],
     LoopConfig(token_budget=100_000), TokenBudgetContinuation(3_900, 100_000, 4)),
    ("previous small, this one 500: go on",
     state(output_tokens=4_100, continuations=3, checked_tokens=3_600, last_delta=300), [],
     LoopConfig(token_budget=100_000), TokenBudgetContinuation(4_100, 100_000, 4)),
    ("two small deltas but only 2 continuations",
     state(output_tokens=3_600, continuations=2, checked_tokens=3_300, last_delta=300), [],
     LoopConfig(token_budget=100_000), TokenBudgetContinuation(3_600, 100_000, 3)),
    ("passing hooks, then the budget", state(output_tokens=10), [StopHookResult()],
     LoopConfig(token_budget=1_000), TokenBudgetContinuation(10, 1_000, 1)),
]  # fmt: skip


@pytest.mark.parametrize(("name", "current", "answers", "config", "expected"), ROWS, ids=[r[0] for r in ROWS])
def test_after_completion(
    name: str, current: LoopState, answers: list[StopHookResult], config: LoopConfig, expected: object
) -> None:
    assert after_completion(current, DONE, answers, config) == expected


def test_a_stop_sequence_completion_is_passed_through() -> None:
    ended = Completed("stop_sequence", "END")
    assert after_completion(state(), ended, [], LoopConfig()) is ended


def test_budget_bookkeeping() -> None:
    budget = BudgetState().record(2_000)
    assert check_budget(budget, None, subagent=False) is None
    continued = budget.continued().record(300)
    assert continued == BudgetState(
        output_tokens=2_300, continuations=1, checked_tokens=2_000, last_delta=2_000
    )
    assert task_budget(continued, 10_000) == {"type": "tokens", "total": 10_000}
    assert task_budget(continued.compacted(), 10_000) == {
        "type": "tokens",
        "total": 10_000,
        "remaining": 7_700,
    }
    nudge = blocks_of(nudge_message(TokenBudgetContinuation(2_300, 10_000, 2)))[0]["text"]
    assert nudge.startswith("Token budget: 2,300 of 10,000 output tokens used (23%), 7,700 left.")


def sized(output_tokens: int, *blocks: dict[str, Any]) -> FakeResponse:
    return FakeResponse.of(
        *(blocks or (text("working"),)), usage={"input_tokens": 50, "output_tokens": output_tokens}
    )


def budget_run(
    sizes: list[int], layers: tuple[Any, ...] | None = None, tools: tuple[FakeTool, ...] = (), **config: Any
) -> tuple[loop.Run, FakeModel]:
    model = FakeModel([sized(n) for n in sizes])
    deps = loop.LoopDeps(call_model=model, clock=VirtualClock())
    if layers is not None:
        deps = replace(deps, layers=layers)
    return loop.query(
        loop.QueryParams("write the report", tools=tools, config=LoopConfig(**config), deps=deps)
    ), model


def continuations(run: loop.Run) -> list[TokenBudgetContinuation]:
    return [t for t in run.state.transitions if isinstance(t, TokenBudgetContinuation)]


async def test_continues_until_90_percent() -> None:
    run, model = budget_run([2_000] * 5, token_budget=10_000)
    assert await run.wait() == DONE
    assert continuations(run) == [TokenBudgetContinuation(n * 2_000, 10_000, n) for n in range(1, 5)]
    assert model.calls() == 5
    second = model.requests[1].body["messages"]
    assert [m["role"] for m in second] == ["user", "assistant", "user"]
    assert second[-1]["content"][0]["text"].startswith(
        "Token budget: 2,000 of 10,000 output tokens used (20%), 8,000 left."
    )
    assert run.messages[-1] == {"role": "assistant", "content": [text("working")]}
    assert pairing_violations(run.messages) == []


async def test_diminishing_returns_stop_after_two_small_continuations() -> None:
    run, model = budget_run([3_000, 300, 300, 300, 300], token_budget=100_000)
    assert await run.wait() == DONE
    assert [c.turn_tokens for c in continuations(run)] == [3_000, 3_300, 3_600]
    assert model.calls() == 4


async def test_one_big_continuation_resets_the_diminishing_count() -> None:
    run, model = budget_run([3_000, 300, 300, 600, 300, 300, 300], token_budget=100_000)
    assert await run.wait() == DONE
    assert len(continuations(run)) == 5 and model.calls() == 6


async def test_a_sub_agent_never_continues_on_budget() -> None:
    run, model = budget_run([100, 100], token_budget=100_000, subagent=True)
    assert await run.wait() == DONE
    assert model.calls() == 1 and continuations(run) == []


async def test_tool_turns_count_towards_the_budget() -> None:
    model = FakeModel([sized(4_000, tool_use("look", {})), sized(4_000), sized(2_000)])
    params = loop.QueryParams(
        "go",
        tools=[FakeTool("look")],
        config=LoopConfig(token_budget=10_000),
        deps=loop.LoopDeps(call_model=model, clock=VirtualClock()),
    )
    run = loop.query(params)
    assert await run.wait() == DONE
    assert run.state.transitions == (NextTurn(1), TokenBudgetContinuation(8_000, 10_000, 1))


async def test_no_budget_sends_nothing_upstream() -> None:
    run, model = budget_run([100])
    await run.wait()
    assert "output_config" not in model.requests[0].body and TASK_BUDGET_BETA not in model.requests[0].betas


async def test_the_task_budget_is_sent_upstream_with_remaining_after_a_compaction() -> None:
    def snip_when_long(
        messages: tuple[Any, ...], layer: LayerState, settings: ContextSettings
    ) -> LayerResult:
        if len(messages) < 5:
            return LayerResult(Layer.SNIP, messages)
        kept = (messages[0], *messages[-2:])
        event = ContextBoundary(layer.turn, Layer.SNIP, 10, len(messages) - len(kept), "test snip")
        return LayerResult(Layer.SNIP, kept, tokens_freed=10, event=event)

    run, model = budget_run(
        [1_000, 1_000, 1_000, 9_000], layers=(snip_when_long,), token_budget=10_000, task_budget_upstream=True
    )
    assert await run.wait() == DONE
    sent = [r.body["output_config"]["task_budget"] for r in model.requests]
    assert sent == [
        {"type": "tokens", "total": 10_000},
        {"type": "tokens", "total": 10_000},
        {"type": "tokens", "total": 10_000, "remaining": 8_000},  # snipped before the 3rd request
        {"type": "tokens", "total": 10_000, "remaining": 7_000},
    ]
    assert all(TASK_BUDGET_BETA in r.betas for r in model.requests)
    assert len(continuations(run)) == 3  # the count itself is unaffected by the compactions


async def test_the_task_budget_stays_local_unless_the_upstream_is_first_party() -> None:
    run, model = budget_run([9_500], token_budget=10_000)
    await run.wait()
    assert "output_config" not in model.requests[0].body  # the FakeModel names no provider


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="token_budget"):
        LoopConfig(token_budget=0)
    with pytest.raises(ValueError, match="max_stop_hook_blocks"):
        LoopConfig(max_stop_hook_blocks=0)
