"""Guardrails end to end: each stops a real run before the next model call, with its report."""

from __future__ import annotations

from loop.testing import FakeResponse, FakeTool, VirtualClock, text, tool_use
from loop.transitions import BlockingLimit, Guardrail, GuardrailKind, MaxTurns
from tests.loop.support import fake_run, pairing_violations


def tool_calls(n: int, *, same_input: bool = True) -> list[FakeResponse]:
    return [FakeResponse.of(tool_use("t", {"path": "a" if same_input else f"f{i}"})) for i in range(n)]


async def test_max_turns_is_a_safety_net() -> None:
    run, model = fake_run(tool_calls(10, same_input=False), tools=[FakeTool("t")], max_turns=3)
    await run.wait()
    assert run.terminal == MaxTurns(3)
    assert len(model.requests) == 3
    assert pairing_violations(run.messages) == []
    assert run.messages[-1]["content"][0]["type"] == "tool_result"  # the last results were kept


async def test_wall_clock_on_the_injected_clock() -> None:
    clock = VirtualClock()
    run, model = fake_run(
        tool_calls(5, same_input=False),
        tools=[FakeTool("t", duration_s=120)],
        clock=clock,
        max_wall_clock_s=300,
    )
    await run.wait()
    assert isinstance(run.terminal, Guardrail) and run.terminal.kind is GuardrailKind.WALL_CLOCK
    assert len(model.requests) == 3 and run.terminal.report.observed == 360
    assert clock.now() == 360


async def test_total_tokens() -> None:
    heavy = {"input_tokens": 30_000, "output_tokens": 5_000}
    script = [FakeResponse.of(tool_use("t", {"n": i}), usage=heavy) for i in range(5)]
    run, model = fake_run(script, tools=[FakeTool("t")], max_total_tokens=100_000)
    await run.wait()
    assert isinstance(run.terminal, Guardrail) and run.terminal.kind is GuardrailKind.TOKENS
    assert len(model.requests) == 3 and run.terminal.report.observed == 105_000


async def test_a_cached_session_is_not_stopped_for_rereading_its_prefix() -> None:
    """A ~20k-token context re-read from the cache on every call: the default guardrail counts
    what is billed (new input, cache writes, output), so 12 calls go through."""
    cached = {
        "input_tokens": 50,
        "cache_read_input_tokens": 20_000,
        "cache_creation_input_tokens": 400,
        "output_tokens": 100,
    }
    script = [FakeResponse.of(tool_use("t", {"n": i}), usage=cached) for i in range(11)]
    run, model = fake_run([*script, FakeResponse.of(text("done"))], tools=[FakeTool("t")])
    await run.wait()
    assert run.terminal.reason == "completed"
    assert len(model.requests) == 12
    assert run.state.usage.billed < 12 * 1_000 and run.state.usage.cache_read_input_tokens > 200_000


async def test_consecutive_error_turns() -> None:
    run, model = fake_run(
        tool_calls(6, same_input=False), tools=[FakeTool("t", error=OSError("disk unplugged"))]
    )
    await run.wait()
    assert isinstance(run.terminal, Guardrail) and run.terminal.kind is GuardrailKind.CONSECUTIVE_ERRORS
    assert len(model.requests) == 3


async def test_one_success_resets_the_error_streak() -> None:
    outcomes = iter([True, True, False, True, True, False])

    def flaky(_: dict[str, object]) -> str:
        if next(outcomes):
            raise_error()
        return "ok"

    def raise_error() -> None:
        raise OSError("flaky")

    script = [*tool_calls(6, same_input=False), FakeResponse.of(text("done"))]
    run, _ = fake_run(script, tools=[FakeTool("t", result=flaky)])
    await run.wait()
    assert run.terminal.reason == "completed"


async def test_the_same_call_repeated() -> None:
    run, model = fake_run(tool_calls(9), tools=[FakeTool("t")])
    await run.wait()
    assert isinstance(run.terminal, Guardrail) and run.terminal.kind is GuardrailKind.REPEATED_TOOL_CALLS
    assert len(model.requests) == 5
    assert '"path":"a"' in run.terminal.report.detail


async def test_blocking_limit() -> None:
    usage = {"input_tokens": 28_000, "output_tokens": 10}
    run, model = fake_run(
        [FakeResponse.of(tool_use("t", {}), usage=usage), FakeResponse.of(text("never"))],
        tools=[FakeTool("t")],
        context_window=50_000,
        max_total_tokens=None,
    )
    await run.wait()
    assert isinstance(run.terminal, BlockingLimit) and run.terminal.limit == 27_000
    assert len(model.requests) == 1
