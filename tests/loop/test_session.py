"""``Session``: history, breaker and budgets across ``query()`` calls; JSON save and resume."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

import loop
from loop.context.result import StoredText
from loop.testing import FakeModel, FakeResponse, FakeTool, VirtualClock, text, tool_use
from loop.transitions import Completed, Guardrail, GuardrailKind
from loop.usage import TokenUsage
from tests.loop.support import pairing_violations


def _session(
    responses: list[FakeResponse], clock: VirtualClock | None = None, **kwargs: Any
) -> tuple[loop.Session, FakeModel]:
    clock = clock or VirtualClock()
    model = FakeModel(responses, clock=clock)
    return loop.Session(deps=loop.LoopDeps(call_model=model, clock=clock), **kwargs), model


USAGE = {"input_tokens": 100, "output_tokens": 20}


async def test_each_query_continues_the_conversation() -> None:
    reader = FakeTool("read_file", result="x = 1")
    session, model = _session(
        [
            FakeResponse.of(tool_use("read_file", {"path": "a.py"}), usage=USAGE),
            FakeResponse.of(text("a.py sets x."), usage=USAGE),
            FakeResponse.of(text("It is 1."), usage=USAGE),
        ],
        tools=[reader],
        options={"permissions": loop.tools.PermissionPolicy(mode=loop.tools.PermissionMode.DONT_ASK)},
    )
    first = session.query("What does a.py do?")
    assert await first.wait() == Completed("end_turn")
    second = session.query("And the value of x?")
    assert await second.wait() == Completed("end_turn")
    sent = model.requests[2].body["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user", "assistant", "user"]
    assert sent[-1]["content"][0]["text"] == "And the value of x?"
    assert session.runs == 2 and len(session.messages) == 6
    assert session.usage.tokens() == TokenUsage(input_tokens=300, output_tokens=60)
    assert session.usage.cost_usd == pytest.approx(
        300 * 3e-6 + 60 * 15e-6
    )  # Sonnet 4.6: $3 / $15 per million
    assert pairing_violations(session.messages) == []


async def test_one_run_at_a_time() -> None:
    session, _ = _session([FakeResponse.of(text("hi"))])
    run = session.query("hello")
    with pytest.raises(RuntimeError, match="has not finished"):
        session.query("again")
    await run.wait()
    assert session.query("again") is not None


async def test_the_session_token_budget_spans_runs() -> None:
    session, model = _session(
        [FakeResponse.of(text("one"), usage=USAGE), FakeResponse.of(text("two"), usage=USAGE)],
        max_total_tokens=120,
    )
    assert await session.query("first").wait() == Completed("end_turn")
    assert session.remaining_tokens == 0
    second = session.query("second")
    terminal = await second.wait()
    assert isinstance(terminal, Guardrail) and terminal.kind is GuardrailKind.TOKENS
    assert len(model.requests) == 1  # the exhausted run never called the model
    assert (terminal.report.observed, terminal.report.limit) == (120, 120)
    assert second.messages[-1]["content"][0]["text"] == "second"


async def test_each_run_gets_what_is_left_of_the_budget() -> None:
    session, model = _session(
        [
            FakeResponse.of(text("one"), usage=USAGE),
            FakeResponse.of(tool_use("read_file", {"path": "a"}), usage=USAGE),
            FakeResponse.of(text("never sent"), usage=USAGE),
        ],
        tools=[FakeTool("read_file", result="data")],
        options={"permissions": loop.tools.PermissionPolicy(mode=loop.tools.PermissionMode.DONT_ASK)},
        max_total_tokens=200,
    )
    await session.query("first").wait()
    second = session.query("second")
    terminal = await second.wait()
    assert isinstance(terminal, Guardrail) and terminal.kind is GuardrailKind.TOKENS
    assert (terminal.report.observed, terminal.report.limit) == (120, 80)  # 200 - 120 left for it
    assert len(model.requests) == 2
    assert session.remaining_tokens == 0 and session.usage.billed == 240
    assert pairing_violations(session.messages) == []


async def test_save_and_resume_round_trip(tmp_path: Path) -> None:
    clock = VirtualClock(1_000.0)
    session, _ = _session([FakeResponse.of(text("noted"), usage=USAGE)], clock=clock, max_total_tokens=10_000)
    await session.query("remember 42").wait()
    session.context.breaker.record_failure(clock.now() - 30.0, threshold=1)  # opened 30 s ago
    session.context.learn_limit(150_000)
    session.context.store.put(StoredText("toolu_9", "read_file", "whole text"))
    path = tmp_path / "chat.json"
    session.save(path)
    saved = orjson.loads(path.read_bytes())
    assert saved["format"] == "switchyard.loop.session" and saved["version"] == 1
    assert saved["context"]["breaker"] == {"consecutive_failures": 1, "trips": 1, "opened_seconds_ago": 30.0}
    assert saved["context"]["reported"]["covered_messages"] == 2

    later = VirtualClock(5.0)  # another process: another clock origin
    model = FakeModel([FakeResponse.of(text("It was 42."), usage=USAGE)], clock=later)
    resumed = loop.Session.load(path, deps=loop.LoopDeps(call_model=model, clock=later))
    assert resumed.to_json() == saved
    assert resumed.messages == session.messages and resumed.usage == session.usage and resumed.runs == 1
    assert resumed.context.breaker.opened_at == -25.0  # still 30 s into its cool-down
    assert resumed.context.store.get("toolu_9") == StoredText("toolu_9", "read_file", "whole text")
    assert (
        resumed.context.reported is not None and resumed.context.reported[1:] == session.context.reported[1:]
    )
    assert resumed.remaining_tokens == 10_000 - 120
    assert await resumed.query("what number?").wait() == Completed("end_turn")
    sent = model.requests[0].body["messages"]
    assert sent[0]["content"][0]["text"] == "remember 42" and sent[1]["content"][0]["text"] == "noted"
    assert resumed.runs == 2


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"format": "something else", "version": 1}, "not a saved session"),
        ([], "not a saved session"),
        ({"format": "switchyard.loop.session", "version": 2}, "unsupported session version 2"),
        ({"format": "switchyard.loop.session", "version": 1, "messages": "no"}, "invalid session file"),
    ],
)
def test_other_files_are_refused(data: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        loop.Session.from_json(data)


async def test_the_session_cost_budget_spans_runs_and_is_saved(tmp_path: Path) -> None:
    # Sonnet 4.6: 100 x $3 + 20 x $15 per million = $0.0006 a response
    session, model = _session(
        [FakeResponse.of(text("one"), usage=USAGE), FakeResponse.of(text("two"), usage=USAGE)],
        max_cost_usd=0.0006,
    )
    assert await session.query("first").wait() == Completed("end_turn")
    assert session.remaining_cost_usd == 0.0
    session.save(tmp_path / "chat.json")
    resumed = loop.Session.load(tmp_path / "chat.json", deps=session.deps)
    assert resumed.max_cost_usd == 0.0006 and resumed.usage == session.usage
    terminal = await resumed.query("second").wait()
    assert isinstance(terminal, Guardrail) and terminal.kind is GuardrailKind.COST
    assert terminal.report.observed == pytest.approx(0.0006) and "spent $0.0006" in terminal.report.detail
    assert len(model.requests) == 1  # the exhausted run never called the model
