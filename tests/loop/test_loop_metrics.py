"""The ``loop_*`` metrics, counted by ``LoopMetrics`` as a run observer, on real runs of the FakeModel.

Every figure is checked against the events and the terminal the same run yielded (counted here
independently), on a registry the test passes in, and in the text exposition Prometheus scrapes.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry

import loop
from gateway.loop_metrics import LoopMetrics
from loop.context.config import ContextConfig
from loop.context.session import ContextSession
from loop.events import AssistantMessage, Compaction, ContextBoundary, LoopEvent, ToolFinished
from loop.request import ModelRequest
from loop.testing import FakeModel, FakeResponse, FakeTool, VirtualClock, text, tool_use
from loop.transitions import Completed, Guardrail, GuardrailKind, MaxTurns, PromptTooLong
from tests.loop.support import run_to_end
from tests.loop.test_context_runs import (
    SMALL_WINDOW,
    conversation,
    prompt_too_long,
    summariser_or,
    work_history,
)


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    found = registry.get_sample_value(name, labels)
    return 0.0 if found is None else found


def run_with(
    messages: Any,
    model: FakeModel,
    metrics: LoopMetrics,
    *,
    session: ContextSession | None = None,
    **config: Any,
) -> loop.Run:
    tools = config.pop("tools", [])
    clock = config.pop("clock", VirtualClock())
    return loop.query(
        loop.QueryParams(
            messages,
            tools=tools,
            config=loop.LoopConfig(**config),
            deps=loop.LoopDeps(call_model=model, clock=clock),
            session=session,
            observers=[metrics],
        )
    )


async def test_every_layer_is_counted_with_the_tokens_it_freed() -> None:
    registry = CollectorRegistry()
    metrics = LoopMetrics(registry)
    model = FakeModel([], then=summariser_or(FakeResponse.of(text("done"))))
    run = run_with(
        work_history(12, 2_400, 55_000, 30_000),
        model,
        metrics,
        tools=[FakeTool("read", max_result_size_chars=5_000)],
        context=ContextConfig(
            snip_max_turns=10,
            snip_batch_turns=2,
            protected_tail_max_tokens=3_000,
            microcompact_keep_results=2,
            microcompact_min_age_turns=2,
        ),
        **SMALL_WINDOW,
    )
    events = await run_to_end(run)
    acted = [e for e in events if isinstance(e, Compaction | ContextBoundary)]
    assert len(acted) == 5
    for event in acted:
        outcome = event.outcome.value if isinstance(event, Compaction) else "applied"
        assert value(registry, "loop_compactions_total", layer=event.layer.value, outcome=outcome) == 1
        assert value(registry, "loop_tokens_freed_total", layer=event.layer.value) == event.tokens_freed > 0
    assert value(registry, "loop_terminal_total", reason="completed") == 1
    answered = [e for e in events if isinstance(e, AssistantMessage)]
    assert value(registry, "loop_context_tokens_count") == len(answered) == 1
    assert value(registry, "loop_context_tokens_sum") == answered[0].usage.context_tokens > 0
    assert value(registry, "loop_breaker_trips_total", breaker="autocompact") == 0


async def test_recoveries_and_the_terminal_of_a_death_spiral() -> None:
    registry = CollectorRegistry()
    metrics = LoopMetrics(registry)
    model = FakeModel([], then=summariser_or(prompt_too_long()))
    run = run_with(conversation(3, chars=4_000), model, metrics)
    await run.wait()
    assert isinstance(run.terminal, PromptTooLong)
    recoveries = [t.reason for t in run.state.transitions]
    assert recoveries == ["reactive_compact_retry"]
    assert value(registry, "loop_recoveries_total", kind="reactive_compact_retry") == 1
    assert value(registry, "loop_terminal_total", reason="prompt_too_long") == 1
    assert value(registry, "loop_compactions_total", layer="reactive_compact", outcome="applied") == 1
    assert value(registry, "loop_context_tokens_count") == 0  # no response was answered


async def test_the_breaker_is_counted_once_across_a_session_of_runs() -> None:
    registry = CollectorRegistry()
    metrics = LoopMetrics(registry)

    def answer(request: ModelRequest) -> FakeResponse:
        if request.source == "compact":
            return FakeResponse.http_error(500, "api_error", "Internal server error")
        return FakeResponse.of(text("done"))

    model = FakeModel([], then=answer)
    session, clock = ContextSession(), VirtualClock()
    config = {"context_window": 60_000, "max_tokens": 4_000, "escalated_max_tokens": 8_000}
    for _ in range(5):
        await run_with(
            conversation(5, chars=13_000), model, metrics, session=session, clock=clock, **config
        ).wait()
    assert value(registry, "loop_compactions_total", layer="autocompact", outcome="failed") == 3
    assert value(registry, "loop_compactions_total", layer="autocompact", outcome="breaker_open") == 2
    assert value(registry, "loop_breaker_trips_total", breaker="autocompact") == 1 == session.breaker.trips
    assert value(registry, "loop_terminal_total", reason="completed") == 5


async def test_guardrails_tools_and_the_exposition() -> None:
    registry = CollectorRegistry()
    metrics = LoopMetrics(registry)
    model = FakeModel([], then=FakeResponse.of(tool_use("read", {"path": "a"})))
    failing = FakeTool("read", error=RuntimeError("disk on fire"))
    run = run_with("loop forever", model, metrics, tools=[failing], max_turns=2, max_consecutive_errors=None)
    events = await run_to_end(run)
    assert run.terminal == MaxTurns(2)
    finished = [e for e in events if isinstance(e, ToolFinished)]
    assert len(finished) == 2 and all(e.is_error for e in finished)
    assert value(registry, "loop_tool_calls_total", tool="read", outcome="error") == 2
    assert value(registry, "loop_breaker_trips_total", breaker="max_turns") == 1
    assert value(registry, "loop_terminal_total", reason="max_turns") == 1
    chatty = FakeModel([], then=FakeResponse.of(text("x" * 4_000), tool_use("read", {"path": "a"})))
    spending = run_with("spend", chatty, metrics, tools=[FakeTool("read")], max_total_tokens=1_500)
    await spending.wait()
    assert isinstance(spending.terminal, Guardrail) and spending.terminal.kind is GuardrailKind.TOKENS
    assert value(registry, "loop_breaker_trips_total", breaker="tokens") == 1
    assert value(registry, "loop_terminal_total", reason="guardrail") == 1
    assert value(registry, "loop_tool_calls_total", tool="read", outcome="ok") == spending.state.turn_count
    exposition = metrics.exposition().decode()
    for name in ("loop_compactions_total", "loop_breaker_trips_total", "loop_context_tokens_bucket"):
        assert name in exposition
    assert 'loop_breaker_trips_total{breaker="max_turns"} 1.0' in exposition


async def test_an_observer_that_raises_does_not_stop_the_run() -> None:
    class Broken:
        seen: list[LoopEvent]

        def __init__(self) -> None:
            self.seen = []

        def on_event(self, event: LoopEvent) -> None:
            self.seen.append(event)
            raise RuntimeError("observer bug")

        def on_terminal(self, terminal: loop.Terminal) -> None:
            raise RuntimeError("observer bug")

    broken = Broken()
    registry = CollectorRegistry()
    model = FakeModel([FakeResponse.of(text("hello"))])
    run = loop.query(
        loop.QueryParams(
            "hi",
            deps=loop.LoopDeps(call_model=model, clock=VirtualClock()),
            observers=[broken, LoopMetrics(registry)],
        )
    )
    events = await run_to_end(run)
    assert run.terminal == Completed("end_turn")
    assert broken.seen == events
    assert value(registry, "loop_terminal_total", reason="completed") == 1


async def test_a_run_closed_before_it_started_is_counted() -> None:
    registry = CollectorRegistry()
    run = loop.query(
        loop.QueryParams(
            "hi", deps=loop.LoopDeps(call_model=FakeModel([])), observers=[LoopMetrics(registry)]
        )
    )
    await run.aclose()
    assert value(registry, "loop_terminal_total", reason="aborted_streaming") == 1


def test_prime_creates_every_series_at_zero() -> None:
    registry = CollectorRegistry()
    LoopMetrics(registry).prime()
    assert value(registry, "loop_terminal_total", reason="completed") == 0
    assert registry.get_sample_value("loop_terminal_total", {"reason": "prompt_too_long"}) == 0
    assert registry.get_sample_value("loop_breaker_trips_total", {"breaker": "wall_clock"}) == 0
    assert registry.get_sample_value("loop_recoveries_total", {"kind": "collapse_drain"}) == 0
    assert registry.get_sample_value("loop_compactions_total", {"layer": "snip", "outcome": "applied"}) == 0
    assert registry.get_sample_value("loop_compactions_total", {"layer": "snip", "outcome": "failed"}) is None
    assert registry.get_sample_value("loop_tokens_freed_total", {"layer": "collapse"}) == 0
