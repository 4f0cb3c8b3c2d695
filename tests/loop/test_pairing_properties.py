"""The pairing invariant under failure at every position (hypothesis).

Scripted conversations mix text, thinking and tool calls (a safe tool, a state-changing tool, a
crashing tool, a tool that does not exist, input that fails validation) over several turns. Each
example then breaks the run somewhere: ``aclose()`` after any event, cancellation of the consuming
task after any event, a mid-stream ``error`` event after any stream event of any response, or an
HTTP error on any request. Every history the loop sends and the final one must satisfy the
invariant, the terminal must be the one that failure implies, and no tool task may outlive the run.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

import loop
from loop.events import AssistantMessage, StreamEvent, ToolFinished, ToolResults, ToolStarted, TransitionEvent
from loop.testing import FakeModel, FakeResponse, FakeTool, VirtualClock, text, thinking, tool_use
from loop.tools import PermissionMode, PermissionPolicy
from loop.transitions import AbortedStreaming, AbortedTools, Completed, ModelError, NextTurn
from tests.loop.support import pairing_violations


class PathOnly(BaseModel):
    path: str


def tools() -> list[FakeTool]:
    return [
        FakeTool("read", result="contents", duration_s=1.0),
        FakeTool("edit", read_only=False, result="edited", duration_s=2.0),
        FakeTool("boom", error=RuntimeError("crash")),
        FakeTool("strict", input_model=PathOnly, result="ok"),
    ]


CALLS = st.sampled_from(
    [
        ("read", {"path": "a"}),
        ("read", {"path": "b"}),
        ("edit", {"path": "a"}),
        ("boom", {}),
        ("ghost", {}),
        ("strict", {"path": 7}),
        ("strict", {"path": "ok"}),
    ]
)
BLOCK = st.one_of(
    st.text(alphabet="abc xyz", min_size=1, max_size=20).map(text),
    CALLS.map(lambda call: tool_use(*call)),
)


@st.composite
def turn_responses(draw: st.DrawFn) -> FakeResponse:
    blocks = draw(st.lists(BLOCK, min_size=1, max_size=4))
    if draw(st.booleans()):
        blocks = [thinking("considering"), *blocks]
    has_calls = any(b["type"] == "tool_use" for b in blocks)
    stop = "tool_use" if has_calls else "pause_turn"  # only the last response ends the run
    return FakeResponse.of(*blocks, stop_reason=stop, chunk_chars=draw(st.sampled_from([4, 16])))


SCRIPTS = st.lists(turn_responses(), min_size=0, max_size=3).map(
    lambda turns: [*turns, FakeResponse.of(text("done"))]
)


@dataclass(frozen=True)
class Failure:
    kind: str  # none | aclose | cancel | stream_error | http_error
    at: int = 0  # event index (aclose/cancel), stream event index (stream_error)
    response: int = 0  # which response (stream_error/http_error)


FAILURES = st.one_of(
    st.just(Failure("none")),
    st.builds(Failure, st.sampled_from(["aclose", "cancel"]), st.integers(0, 120)),
    st.builds(Failure, st.just("stream_error"), st.integers(0, 60), st.integers(0, 3)),
    st.builds(Failure, st.just("http_error"), st.just(0), st.integers(0, 3)),
)


def with_failure(script: list[FakeResponse], failure: Failure) -> list[FakeResponse]:
    if failure.kind not in ("stream_error", "http_error") or failure.response >= len(script):
        return script
    broken = list(script)
    target = broken[failure.response]
    if failure.kind == "http_error":
        broken[failure.response] = FakeResponse.http_error(529, "overloaded_error", "Overloaded")
    else:
        broken[failure.response] = replace(target, fail_after=failure.at)
    return broken


@dataclass
class Observed:
    events: list[loop.LoopEvent]
    run: loop.Run
    model: FakeModel
    leftover_tool_tasks: int


async def scenario(script: list[FakeResponse], failure: Failure) -> Observed:
    clock = VirtualClock()
    model = FakeModel(with_failure(script, failure), clock=clock, event_delay_s=0.5)
    run = loop.query(
        loop.QueryParams(
            "start",
            tools=tools(),
            config=loop.LoopConfig(max_consecutive_errors=None, max_repeated_tool_calls=None, max_turns=50),
            deps=loop.LoopDeps(call_model=model, clock=clock),
            permissions=PermissionPolicy(mode=PermissionMode.BYPASS_PERMISSIONS),
        )
    )
    events: list[loop.LoopEvent] = []

    async def consume() -> None:
        async for event in run:
            events.append(event)
            if failure.kind == "aclose" and len(events) > failure.at:
                await run.aclose()
                return
            if failure.kind == "cancel" and len(events) > failure.at:
                asyncio.current_task().cancel()  # type: ignore[union-attr]

    consumer = asyncio.create_task(consume())
    with contextlib.suppress(asyncio.CancelledError):
        await consumer
    await asyncio.sleep(0)
    leftover = [t for t in asyncio.all_tasks() if t.get_name().startswith("tool:") and not t.done()]
    return Observed(events, run, model, len(leftover))


def expected_abort(events: list[loop.LoopEvent]) -> type[loop.Terminal]:
    """The terminal of an aclose() right after the last of ``events``."""
    last = events[-1]
    if isinstance(last, StreamEvent):
        return AbortedStreaming
    turn_events = [e for e in events if getattr(e, "turn", None) == last.turn]  # type: ignore[union-attr]
    assistant_seen = any(isinstance(e, AssistantMessage) for e in turn_events)
    if isinstance(last, AssistantMessage):
        return AbortedTools if last.stop_reason == "tool_use" else AbortedStreaming
    if isinstance(last, ToolStarted | ToolFinished):
        return AbortedTools if assistant_seen else AbortedStreaming
    if isinstance(last, ToolResults):
        return AbortedTools
    if isinstance(last, TransitionEvent):
        return AbortedTools if isinstance(last.transition, NextTurn) else AbortedStreaming
    raise AssertionError(f"unexpected event {last!r}")


def check(observed: Observed, script: list[FakeResponse], failure: Failure) -> None:
    run = observed.run
    assert run.finished
    assert pairing_violations(run.messages) == [], run.messages
    for request in observed.model.requests:
        assert pairing_violations(request.body["messages"]) == []
    assert observed.leftover_tool_tasks == 0
    terminal = run.terminal
    if failure.kind == "none":
        assert terminal == Completed("end_turn")
        assert len(observed.model.requests) == len(script)
    elif failure.kind == "aclose":
        if run.terminal == Completed("end_turn"):
            # the run had settled: the abort came at (or after) its final event
            assert isinstance(observed.events[-1], AssistantMessage | ToolResults)
        else:
            assert type(terminal) is expected_abort(observed.events)
    elif failure.kind == "cancel":
        assert isinstance(terminal, AbortedStreaming | AbortedTools | Completed)
    elif failure.response >= len(script):
        assert terminal == Completed("end_turn")
    elif failure.kind == "http_error":
        assert terminal == ModelError("overloaded_error", "Overloaded", 529)
        assert len(observed.model.requests) == failure.response + 1
    else:
        stream_events = len(script[failure.response].events(failure.response + 1))
        if failure.at < stream_events:
            assert terminal == ModelError("overloaded_error", "Overloaded", None)
            assert len(observed.model.requests) == failure.response + 1
        else:
            assert terminal == Completed("end_turn")


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=SCRIPTS, failure=FAILURES)
def test_the_invariant_holds_whatever_breaks_and_wherever(
    script: list[FakeResponse], failure: Failure
) -> None:
    observed = asyncio.run(scenario(script, failure))
    check(observed, script, failure)


def test_abort_at_every_event_of_one_rich_conversation() -> None:
    """Exhaustive over positions for one conversation with every kind of call."""
    script = [
        FakeResponse.of(
            thinking("plan"), text("look"), tool_use("read", {"path": "a"}), tool_use("edit", {"path": "a"})
        ),
        FakeResponse.of(tool_use("boom", {}), tool_use("ghost", {}), tool_use("read", {"path": "b"})),
        FakeResponse.of(text("pausing"), stop_reason="pause_turn"),
        FakeResponse.of(text("done")),
    ]
    full = asyncio.run(scenario(script, Failure("none")))
    check(full, script, Failure("none"))
    assert len(full.events) > 40
    for position in range(len(full.events)):
        for kind in ("aclose", "cancel"):
            failure = Failure(kind, position)
            check(asyncio.run(scenario(script, failure)), script, failure)
