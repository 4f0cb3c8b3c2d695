"""Sticky model fallback on fake models: the ``decide`` rows, the count, the switch (for the rest of
the run, thinking stripped), a caller's own fallback made sticky."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

import loop
from loop.config import LoopConfig
from loop.decide import decide
from loop.deps import ModelStreamItem
from loop.events import StatusEvent, Tombstone
from loop.outcome import ApiErrorInfo, TurnOutcome
from loop.request import ModelRequest
from loop.state import LoopState
from loop.testing import FakeModel, FakeResponse, FakeTool, VirtualClock, text, thinking, tool_use
from loop.tools import PermissionMode, PermissionPolicy
from loop.transitions import (
    Completed,
    ModelError,
    ModelFallback,
    NextTurn,
    OverloadRetry,
    Terminal,
    Transition,
)
from tests.loop.support import fake_run, of_type, pairing_violations, run_to_end

PRIMARY, FALLBACK = "claude-sonnet-4-6", "claude-haiku-4-5"
WITH_FALLBACK = LoopConfig(model=PRIMARY, fallback_model=FALLBACK)
OVERLOADED = TurnOutcome(error=ApiErrorInfo("overloaded_error", "Overloaded", 529))
MID_STREAM = TurnOutcome(error=ApiErrorInfo("overloaded_error", "Overloaded", None))
STATUS_529 = TurnOutcome(error=ApiErrorInfo("api_error", "HTTP 529", 529))
RATE_LIMITED = TurnOutcome(error=ApiErrorInfo("rate_limit_error", "slow down", 429))


def state(overloads: int = 0, model: str = "") -> LoopState:
    return LoopState(messages=(), started_at=0.0, consecutive_overloads=overloads, model=model)


@pytest.mark.parametrize(
    ("config", "before", "outcome", "expected"),
    [
        (LoopConfig(), state(), OVERLOADED, ModelError("overloaded_error", "Overloaded", 529)),
        (WITH_FALLBACK, state(), OVERLOADED, OverloadRetry(PRIMARY, 1)),
        (WITH_FALLBACK, state(1), MID_STREAM, OverloadRetry(PRIMARY, 2)),
        (WITH_FALLBACK, state(2), MID_STREAM, ModelFallback(PRIMARY, FALLBACK)),
        (WITH_FALLBACK, state(0), STATUS_529, OverloadRetry(PRIMARY, 1)),
        (WITH_FALLBACK, state(0, FALLBACK), OVERLOADED, ModelError("overloaded_error", "Overloaded", 529)),
        (WITH_FALLBACK, state(2), RATE_LIMITED, ModelError("rate_limit_error", "slow down", 429)),
        (
            LoopConfig(model=PRIMARY, fallback_model=FALLBACK, fallback_after_overloads=1),
            state(),
            MID_STREAM,
            ModelFallback(PRIMARY, FALLBACK),
        ),
    ],
)
def test_decide_rows(
    config: LoopConfig, before: LoopState, outcome: TurnOutcome, expected: Transition | Terminal
) -> None:
    assert decide(before, outcome, config) == expected


def overloaded() -> FakeResponse:
    return FakeResponse.http_error(529, "overloaded_error", "Overloaded")


async def test_three_overloads_switch_for_the_rest_of_the_run() -> None:
    clock = VirtualClock()
    run, model = fake_run(
        [
            overloaded(),
            overloaded(),
            overloaded(),
            FakeResponse.of(tool_use("read", {})),
            FakeResponse.of(text("done")),
        ],
        tools=[FakeTool("read")],
        clock=clock,
        model=PRIMARY,
        fallback_model=FALLBACK,
    )
    events = await run_to_end(run)
    assert run.terminal == Completed("end_turn")
    assert [r.body["model"] for r in model.requests] == [PRIMARY, PRIMARY, PRIMARY, FALLBACK, FALLBACK]
    assert run.state.transitions == (
        OverloadRetry(PRIMARY, 1),
        OverloadRetry(PRIMARY, 2),
        ModelFallback(PRIMARY, FALLBACK),
        NextTurn(1),
    )
    assert clock.now() == 0.5 + 1.0  # the backoff doubles, on the injected clock
    assert [e.kind for e in of_type(events, StatusEvent)] == ["retry", "retry", "fallback"]
    assert of_type(events, Tombstone) == []  # nothing streamed: nothing to drop


async def test_a_success_resets_the_count() -> None:
    run, model = fake_run(
        [
            overloaded(),
            FakeResponse.of(tool_use("read", {})),
            overloaded(),
            overloaded(),
            FakeResponse.of(text("ok")),
        ],
        tools=[FakeTool("read")],
        model=PRIMARY,
        fallback_model=FALLBACK,
    )
    await run.wait()
    assert run.terminal == Completed("end_turn")
    assert {r.body["model"] for r in model.requests} == {PRIMARY}


async def test_the_switch_strips_thinking_and_turns_it_off() -> None:
    signed = FakeResponse.of(thinking("let me see", signature="sig-primary"), tool_use("read", {}))
    broken = FakeResponse.of(thinking("again"), text("partial"), tool_use("read", {})).failing_after(12)
    run, model = fake_run(
        [signed, broken, broken, broken, FakeResponse.of(text("done"))],
        tools=[FakeTool("read")],
        model=PRIMARY,
        fallback_model=FALLBACK,
        max_tokens=8_000,
        thinking_budget_tokens=2_048,
    )
    events = await run_to_end(run)
    assert run.terminal == Completed("end_turn")
    before, after = model.requests[3].body, model.requests[4].body
    assert before["model"] == PRIMARY and "thinking" in before
    assert after["model"] == FALLBACK and "thinking" not in after
    blocks = [b for m in after["messages"] for b in (m["content"] if isinstance(m["content"], list) else [])]
    assert not [b for b in blocks if b.get("type") in ("thinking", "redacted_thinking")]
    assert pairing_violations(after["messages"]) == []
    assert len(of_type(events, Tombstone)) == 3


class SelfFallingBack:
    """A caller that falls back by itself on its first request (as the provider caller does with
    ``GATEWAY_FALLBACK_MODEL``) and reports it with a status event."""

    def __init__(self) -> None:
        self.models: list[str] = []
        self._model = FakeModel([FakeResponse.of(tool_use("read", {})), FakeResponse.of(text("done"))])

    async def __call__(self, request: ModelRequest) -> AsyncIterator[ModelStreamItem]:
        self.models.append(request.body["model"])
        if len(self.models) == 1:
            yield StatusEvent("fallback", "overloaded: falling back", model=FALLBACK)
        async for item in self._model(request):
            yield item


async def test_a_callers_own_fallback_is_sticky() -> None:
    caller = SelfFallingBack()
    run = loop.query(
        loop.QueryParams(
            "go",
            tools=[FakeTool("read")],
            config=LoopConfig(model=PRIMARY),
            deps=loop.LoopDeps(call_model=caller, clock=VirtualClock()),
            permissions=PermissionPolicy(mode=PermissionMode.DONT_ASK),
        )
    )
    await run.wait()
    assert caller.models == [PRIMARY, FALLBACK]
    assert run.state.model == FALLBACK


async def test_summarisation_after_the_switch_goes_to_the_fallback_model() -> None:
    """The switch is for the rest of the run: a compaction after it is not sent to the overloaded
    primary (and is priced for the model it went to)."""
    overloaded = FakeResponse.http_error(529, "overloaded_error", "Overloaded")
    grown = FakeResponse.of(tool_use("read", {}), usage={"input_tokens": 170_000, "output_tokens": 10})

    def answer(request: ModelRequest) -> FakeResponse:
        return FakeResponse.of(text("Summary of the work." if request.source == "compact" else "done"))

    model = FakeModel([overloaded, overloaded, overloaded, grown], then=answer)
    history = [
        message
        for i in range(6)
        for message in (
            {"role": "user", "content": f"question {i}: " + "q" * 15_000},
            {"role": "assistant", "content": [text(f"answer {i}: " + "a" * 15_000)]},
        )
    ]
    run = loop.query(
        loop.QueryParams(
            [*history, {"role": "user", "content": "now the task"}],
            tools=[FakeTool("read")],
            config=WITH_FALLBACK,
            deps=loop.LoopDeps(call_model=model, clock=VirtualClock()),
            permissions=PermissionPolicy(mode=PermissionMode.DONT_ASK),
        )
    )
    await run.wait()
    assert run.terminal == Completed("end_turn")
    sent = [(r.source, r.body["model"]) for r in model.requests]
    assert sent[3:] == [("sdk", FALLBACK), ("compact", FALLBACK), ("sdk", FALLBACK)]
