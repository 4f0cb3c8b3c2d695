"""End-to-end runs on the FakeModel: every stop reason, errors, transitions, events, requests."""

from __future__ import annotations

from typing import Any, assert_never

import pytest

import loop
from loop.advance import CONTINUE_PROMPT
from loop.context.kinds import Layer
from loop.context.layers import ContextLayer
from loop.context.result import LayerResult
from loop.context.settings import ContextSettings, LayerState
from loop.events import AssistantMessage, StatusEvent, StreamEvent, ToolFinished, ToolResults, TransitionEvent
from loop.messages import NOT_EXECUTED_RESULT_TEXT
from loop.request import ModelRequest
from loop.testing import FakeModel, FakeResponse, FakeTool, VirtualClock, text, thinking, tool_use
from loop.transitions import (
    Completed,
    MaxOutputTokensEscalate,
    MaxOutputTokensRecovery,
    ModelError,
    NextTurn,
    PauseTurnResume,
    PromptTooLong,
    ReactiveCompactRetry,
    Refusal,
)
from tests.loop.support import fake_run, of_type, pairing_violations, run_to_end


async def test_a_text_answer_completes() -> None:
    run, model = fake_run([FakeResponse.of(text("Hello!"))])
    events = await run_to_end(run)
    assert run.terminal == Completed("end_turn")
    assert run.messages == [
        {"role": "user", "content": [{"type": "text", "text": "do the task"}]},
        {"role": "assistant", "content": [text("Hello!")]},
    ]
    assert [type(e) for e in events if not isinstance(e, StreamEvent)] == [AssistantMessage]
    assert run.state.turn_count == 1 and run.state.transitions == ()
    assert len(model.requests) == 1


async def test_a_tool_round_trip() -> None:
    reader = FakeTool("read_file", result="print('hi')")
    run, model = fake_run(
        [
            FakeResponse.of(text("Reading."), tool_use("read_file", {"path": "a.py"})),
            FakeResponse.of(text("It prints hi.")),
        ],
        tools=[reader],
    )
    events = await run_to_end(run)
    assert run.terminal == Completed("end_turn")
    assert run.state.transitions == (NextTurn(1),)
    assert [c.input for c in reader.calls] == [{"path": "a.py"}]
    second = model.requests[1].body["messages"]
    assert second[-1]["role"] == "user"
    assert second[-1]["content"][0]["tool_use_id"] == "toolu_fake_1_1"
    assert second[-1]["content"][0]["content"] == "print('hi')"
    kinds = [type(e).__name__ for e in events if not isinstance(e, StreamEvent)]
    assert kinds == [
        "AssistantMessage",
        "ToolStarted",
        "ToolFinished",
        "ToolResults",
        "TransitionEvent",
        "AssistantMessage",
    ]
    assert pairing_violations(run.messages) == []


async def test_stop_sequence_completes() -> None:
    run, _ = fake_run([FakeResponse.of(text("Echo"), stop_reason="stop_sequence", stop_sequence="STOP")])
    await run.wait()
    assert run.terminal == Completed("stop_sequence", "STOP")


async def test_pause_turn_is_sent_back_and_the_model_continues() -> None:
    run, model = fake_run(
        [FakeResponse.of(text("Searching..."), stop_reason="pause_turn"), FakeResponse.of(text("Found it."))]
    )
    await run.wait()
    assert run.terminal == Completed("end_turn")
    assert run.state.transitions == (PauseTurnResume(),)
    assert run.messages[1] == {"role": "assistant", "content": [text("Searching...")]}
    sent = model.requests[1].body["messages"][-1]
    assert sent["role"] == "assistant" and sent["content"][0]["text"] == "Searching..."


async def test_max_tokens_escalates_once_then_recovers_three_times_then_stops() -> None:
    cut = FakeResponse.of(text("part"), stop_reason="max_tokens")
    run, model = fake_run([cut] * 5)
    events = await run_to_end(run)
    assert run.state.transitions == (
        MaxOutputTokensEscalate(64_000),
        MaxOutputTokensRecovery(1),
        MaxOutputTokensRecovery(2),
        MaxOutputTokensRecovery(3),
    )
    assert isinstance(run.terminal, ModelError) and run.terminal.error_type == "max_output_tokens"
    assert [r.body["max_tokens"] for r in model.requests] == [8_000, 64_000, 64_000, 64_000, 64_000]
    # the escalation retry is clean: the truncated response was discarded, not sent back
    assert model.requests[1].body["messages"] == model.requests[0].body["messages"]
    # each recovery sends the partial turn and a "continue" message
    assert model.requests[2].body["messages"][-2:] == [
        {"role": "assistant", "content": [text("part")]},
        {
            "role": "user",
            "content": [{"type": "text", "text": CONTINUE_PROMPT, "cache_control": {"type": "ephemeral"}}],
        },
    ]
    # the discarded response is withheld: 3 kept partial turns, not 5
    assert len(of_type(events, AssistantMessage)) == 3


async def test_max_tokens_recovery_then_success_resets_on_next_turn() -> None:
    cut = FakeResponse.of(text("part"), stop_reason="max_tokens")
    run, model = fake_run(
        [
            cut,
            cut,
            FakeResponse.of(text("rest"), tool_use("t", {})),
            cut,
            FakeResponse.of(text("end")),
        ],
        tools=[FakeTool("t")],
    )
    await run.wait()
    assert run.terminal == Completed("end_turn")
    assert [t.reason for t in run.state.transitions] == [
        "max_output_tokens_escalate",
        "max_output_tokens_recovery",
        "next_turn",
        "max_output_tokens_escalate",
    ]
    assert [r.body["max_tokens"] for r in model.requests] == [8_000, 64_000, 64_000, 8_000, 64_000]


async def test_a_truncated_tool_use_is_never_executed() -> None:
    tool = FakeTool("write", read_only=False)
    run, _ = fake_run(
        [
            FakeResponse.of(text("writing"), tool_use("write", {"content": "x"}), stop_reason="max_tokens"),
            FakeResponse.of(text("done")),
        ],
        tools=[tool],
    )
    await run.wait()
    assert run.terminal == Completed("end_turn")
    assert tool.calls == []
    assert pairing_violations(run.messages) == []


async def test_a_safe_tool_started_during_a_truncated_response_is_discarded() -> None:
    clock = VirtualClock()
    reader = FakeTool("read", duration_s=10)
    run, model = fake_run(
        [
            FakeResponse.of(tool_use("read", {"p": 1}), text("and more text"), stop_reason="max_tokens"),
            FakeResponse.of(text("done")),
        ],
        tools=[reader],
        clock=clock,
        event_delay_s=1.0,
    )
    events = await run_to_end(run)
    assert len(reader.started) == 1 and reader.calls == []  # started while streaming, then cancelled
    assert of_type(events, ToolResults) == []
    assert "tool_use" not in str(model.requests[1].body["messages"])


async def test_refusal() -> None:
    details = {"type": "refusal", "category": None, "explanation": None}
    run, _ = fake_run(
        [FakeResponse.of(text("I can't help with that."), stop_reason="refusal", stop_details=details)]
    )
    await run.wait()
    assert run.terminal == Refusal(details)
    assert run.messages[-1] == {"role": "assistant", "content": [text("I can't help with that.")]}


async def test_context_window_exceeded_compacts_and_retries_once_then_is_prompt_too_long() -> None:
    exceeded = FakeResponse.of(text("cut"), stop_reason="model_context_window_exceeded")
    run, model = fake_run([exceeded, exceeded])
    await run.wait()
    assert isinstance(run.terminal, PromptTooLong)
    assert run.terminal.error_kind == "model_context_window_exceeded"
    assert run.state.transitions == (ReactiveCompactRetry("model_context_window_exceeded"),)
    assert len(model.requests) == 2
    assert len(run.messages) == 1


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        (
            FakeResponse.http_error(529, "overloaded_error", "Overloaded"),
            ModelError("overloaded_error", "Overloaded", 529),
        ),
        (
            FakeResponse.http_error(401, "authentication_error", "invalid x-api-key"),
            ModelError("authentication_error", "invalid x-api-key", 401),
        ),
        (
            FakeResponse.of(text("hello world"), fail_after=4),
            ModelError("overloaded_error", "Overloaded", None),
        ),
    ],
)
async def test_api_errors_end_as_model_error(response: FakeResponse, expected: ModelError) -> None:
    run, _ = fake_run([response])
    await run.wait()
    assert run.terminal == expected


async def test_a_413_is_prompt_too_long_once_reactive_compaction_was_tried() -> None:
    too_large = FakeResponse.http_error(
        413, "request_too_large", "Request exceeds the maximum allowed number of bytes."
    )
    run, model = fake_run([too_large, too_large])
    await run.wait()
    assert isinstance(run.terminal, PromptTooLong) and run.terminal.error_kind == "request_too_large"
    assert [t.reason for t in run.state.transitions] == ["reactive_compact_retry"]
    assert len(model.requests) == 2


async def test_a_model_error_mid_stream_answers_the_calls_already_streamed() -> None:
    response = FakeResponse.of(tool_use("read", {"p": 1}), text("more"))
    fail_at = next(
        i for i, e in enumerate(response.events()) if e["type"] == "content_block_start" and e["index"] == 1
    )
    run, _ = fake_run([response.failing_after(fail_at + 1)], tools=[FakeTool("read")])
    events = await run_to_end(run)
    assert run.terminal == ModelError("overloaded_error", "Overloaded", None)
    assert run.messages[-1]["content"][0]["content"] == NOT_EXECUTED_RESULT_TEXT
    assert pairing_violations(run.messages) == []
    assert isinstance(events[-1], ToolResults)


async def test_a_caller_that_raises_ends_as_model_error() -> None:
    model = FakeModel([])
    run = loop.query(loop.QueryParams("hi", deps=loop.LoopDeps(call_model=model, clock=VirtualClock())))
    await run.wait()
    assert isinstance(run.terminal, ModelError) and run.terminal.error_type == "client_error"
    assert "FakeModelExhausted" in run.terminal.message


async def test_unknown_tool_and_bad_input_are_answered_with_errors_and_the_loop_continues() -> None:
    from pydantic import BaseModel

    class Strict(BaseModel):
        path: str

    run, model = fake_run(
        [
            FakeResponse.of(tool_use("nope", {}), tool_use("read", {"path": 3})),
            FakeResponse.of(text("sorry")),
        ],
        tools=[FakeTool("read", input_model=Strict), FakeTool("list")],
    )
    await run.wait()
    results = model.requests[1].body["messages"][-1]["content"]
    assert (
        results[0]["is_error"]
        and "Unknown tool 'nope'. Available tools: read, list, read_tool_result." in results[0]["content"]
    )
    assert results[1]["is_error"] and "Expected input schema" in results[1]["content"]
    assert run.terminal == Completed("end_turn")


async def test_a_tool_crash_is_an_error_result() -> None:
    run, model = fake_run(
        [FakeResponse.of(tool_use("boom", {})), FakeResponse.of(text("ok"))],
        tools=[FakeTool("boom", error=RuntimeError("disk on fire"))],
    )
    await run.wait()
    result = model.requests[1].body["messages"][-1]["content"][0]
    assert result["is_error"] is True and "RuntimeError: disk on fire" in result["content"]


async def test_thinking_blocks_are_preserved_across_the_tool_round_trip() -> None:
    run, model = fake_run(
        [FakeResponse.of(thinking("plan"), tool_use("t", {})), FakeResponse.of(text("done"))],
        tools=[FakeTool("t")],
        thinking_budget_tokens=2048,
    )
    await run.wait()
    sent = model.requests[1].body
    assert sent["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert sent["messages"][1]["content"][0] == thinking("plan")


async def test_request_shape_and_cache_breakpoints() -> None:
    model = FakeModel([FakeResponse.of(tool_use("t", {})), FakeResponse.of(text("done"))])
    params = loop.QueryParams(
        messages="task",
        system="You are terse.",
        tools=[FakeTool("t")],
        config=loop.LoopConfig(model="claude-opus-4-8", betas=("b1",), stop_sequences=("END",)),
        deps=loop.LoopDeps(call_model=model, clock=VirtualClock(), uuid=lambda: "req_fixed"),
    )
    run = loop.query(params)
    await run.wait()
    assert "cache_control" not in str(run.messages)  # markers go on request copies only
    first: ModelRequest = model.requests[0]
    assert first.request_id == "req_fixed" and first.betas == ("b1",)
    body = first.body
    assert body["model"] == "claude-opus-4-8" and body["stream"] is True and body["stop_sequences"] == ["END"]
    assert body["system"] == [
        {"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}
    ]
    assert body["tools"][0]["name"] == "t" and "input_schema" in body["tools"][0]
    assert body["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    second = model.requests[1].body["messages"]
    markers = [b for m in second for b in m["content"] if "cache_control" in b]
    assert len(markers) == 1 and markers[0]["type"] == "tool_result"  # the breakpoint moved


async def test_status_events_from_the_caller_are_passed_through() -> None:
    async def retrying_caller(request: ModelRequest) -> Any:
        yield StatusEvent(
            "retry",
            "overloaded, retrying in 1s",
            attempt=1,
            delay_s=1.0,
            error_type="overloaded_error",
            status=529,
        )
        for event in FakeResponse.of(text("hi")).events():
            yield event

    run = loop.query(
        loop.QueryParams("hi", deps=loop.LoopDeps(call_model=retrying_caller, clock=VirtualClock()))
    )
    events = await run_to_end(run)
    assert events[0] == StatusEvent("retry", "overloaded, retrying in 1s", 1, 1.0, "overloaded_error", 529)
    assert run.terminal == Completed("end_turn")


async def test_the_layer_seam_runs_before_every_request_in_order() -> None:
    seen: list[str] = []

    def recording(name: str) -> ContextLayer:
        def layer(
            messages: tuple[dict[str, Any], ...], state: LayerState, settings: ContextSettings
        ) -> LayerResult:
            seen.append(f"{name}:{len(messages)}:{state.turn}")
            if name == "trim" and len(messages) > 3:
                return LayerResult(Layer.SNIP, (messages[0], *messages[-2:]))
            return LayerResult(Layer.SNIP, messages)

        return layer

    model = FakeModel(
        [FakeResponse.of(tool_use("t", {"n": n})) for n in range(3)] + [FakeResponse.of(text("done"))]
    )
    deps = loop.LoopDeps(
        call_model=model, clock=VirtualClock(), layers=(recording("first"), recording("trim"))
    )
    run = loop.query(loop.QueryParams("go", tools=[FakeTool("t")], deps=deps))
    await run.wait()
    assert seen == [
        "first:1:1",
        "trim:1:1",
        "first:3:2",
        "trim:3:2",
        "first:5:3",
        "trim:5:3",
        "first:5:4",
        "trim:5:4",
    ]
    assert all(len(r.body["messages"]) <= 3 for r in model.requests)
    assert run.terminal == Completed("end_turn")


async def test_stream_events_can_be_turned_off() -> None:
    run, _ = fake_run([FakeResponse.of(text("hi"))], stream_events=False)
    events = await run_to_end(run)
    assert of_type(events, StreamEvent) == []


async def test_the_terminal_can_be_matched_exhaustively() -> None:
    run, _ = fake_run([FakeResponse.of(text("hi"))])
    terminal = await run.wait()

    def explain(t: loop.Terminal) -> str:
        match t:
            case loop.Completed(stop_reason=reason):
                return f"done ({reason})"
            case loop.AbortedStreaming() | loop.AbortedTools():
                return "aborted"
            case loop.MaxTurns(max_turns=n):
                return f"gave up after {n} turns"
            case loop.PromptTooLong() | loop.BlockingLimit():
                return "too long"
            case loop.ModelError(error_type=kind):
                return f"model error {kind}"
            case loop.Refusal():
                return "refused"
            case loop.Guardrail(kind=kind):
                return f"guardrail {kind}"
            case loop.StopHookPrevented(message=message):
                return message
            case loop.StopHookLimit(limit=limit):
                return f"stop hooks blocked more than {limit} times"
            case loop.HookStopped(event=event, message=message):
                return f"{event} hook: {message}"
            case _:
                assert_never(t)

    assert explain(terminal) == "done (end_turn)"


async def test_tool_events_carry_results_and_timing() -> None:
    clock = VirtualClock()
    run, _ = fake_run(
        [FakeResponse.of(tool_use("slow", {})), FakeResponse.of(text("ok"))],
        tools=[FakeTool("slow", result="r", duration_s=7)],
        clock=clock,
    )
    events = await run_to_end(run)
    (finished,) = of_type(events, ToolFinished)
    assert finished.duration_s == 7 and finished.result["content"] == "r" and not finished.is_error
    (transition,) = of_type(events, TransitionEvent)
    assert transition.transition == NextTurn(1)


async def test_tool_input_that_does_not_parse_is_answered_not_executed() -> None:
    tool = FakeTool("read")
    run, model = fake_run(
        [
            FakeResponse.of(tool_use("read", {}, raw_json='{"path": "a')),
            FakeResponse.of(text("retrying later")),
        ],
        tools=[tool],
    )
    await run.wait()
    assert tool.calls == []
    sent = model.requests[1].body["messages"]
    assert sent[1]["content"][0]["input"] == {}  # the replayed call is a valid object
    result = sent[2]["content"][0]
    assert result["is_error"] is True and "not valid JSON" in result["content"]
    assert run.terminal == Completed("end_turn")
