"""The context layers and the recovery ladder in real runs on the FakeModel.

Layer order in one pass, collapse making auto-compact a no-op, the death spirals (with exact call
counts), stop hooks, withholding, an upstream whose real limit is far below the configured window,
the server-side microcompact variant, the thinking downgrade, and reading a stored result back.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import orjson
import pytest

import loop
from loop.context.config import ContextConfig
from loop.context.kinds import LAYER_ORDER, Layer, Outcome
from loop.context.session import ContextSession
from loop.events import AssistantMessage, Compaction, ContextBoundary, StreamEvent, TransitionEvent
from loop.messages import Message
from loop.request import ModelRequest
from loop.stop_hooks import StopHookResult
from loop.testing import FakeModel, FakeResponse, FakeTool, VirtualClock, text, thinking, tool_use
from loop.transitions import (
    CollapseDrain,
    Completed,
    Guardrail,
    GuardrailKind,
    ModelError,
    NextTurn,
    PromptTooLong,
    ReactiveCompactRetry,
    StopHookBlocking,
    ThinkingDowngrade,
)
from tests.loop.support import pairing_violations, run_to_end, thinking_violations

PTL_MESSAGE = "prompt is too long: 210000 tokens > 200000 maximum"
SUMMARY = "Summary: the agent read the files it needed and found the bug in parse()."


def prompt_too_long() -> FakeResponse:
    return FakeResponse.http_error(400, "invalid_request_error", PTL_MESSAGE)


def user(value: str) -> Message:
    return {"role": "user", "content": [{"type": "text", "text": value}]}


def assistant(*blocks: dict[str, Any]) -> Message:
    return {"role": "assistant", "content": list(blocks)}


def result(tool_use_id: str, content: str) -> Message:
    return {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": tool_use_id, "content": content}],
    }


def call(tool_use_id: str, name: str = "read", **tool_input: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_use_id, "name": name, "input": tool_input}


def conversation(turns: int, *, chars: int) -> list[Message]:
    """An earlier conversation without tool work: ``turns`` question/answer pairs, then a task."""
    messages: list[Message] = []
    for i in range(turns):
        messages += [user(f"question {i}: " + "q" * chars), assistant(text(f"answer {i}: " + "a" * chars))]
    return [*messages, user("now fix the bug")]


def summariser_or(main: FakeResponse | Any) -> Any:
    """Answer summarisation calls with ``SUMMARY`` and the others with ``main``."""

    def answer(request: ModelRequest) -> FakeResponse:
        if request.source == "compact":
            return FakeResponse.of(text(SUMMARY))
        return main(request) if callable(main) else main

    return answer


def run_with(
    messages: str | list[Message],
    model: FakeModel,
    *,
    tools: list[Any] | None = None,
    session: ContextSession | None = None,
    stop_hooks: tuple[Any, ...] = (),
    clock: VirtualClock | None = None,
    **config: Any,
) -> loop.Run:
    return loop.query(
        loop.QueryParams(
            messages,
            tools=tools or [],
            config=loop.LoopConfig(**config),
            deps=loop.LoopDeps(call_model=model, clock=clock or VirtualClock()),
            session=session,
            stop_hooks=stop_hooks,
        )
    )


def context_events(events: list[loop.LoopEvent]) -> list[Compaction | ContextBoundary]:
    return [e for e in events if isinstance(e, Compaction | ContextBoundary)]


def main_calls(model: FakeModel) -> int:
    return model.calls() - model.calls("compact")


# --- layer order, and collapse making auto-compact a no-op ------------------------------------


def work_history(pairs: int, result_chars: int, notes_chars: int, last_chars: int) -> list[Message]:
    messages = [user("task")]
    for i in range(pairs):
        messages += [
            assistant(text(f"step {i}"), call(f"toolu_{i}", n=i)),
            result(f"toolu_{i}", "r" * result_chars),
        ]
    messages += [assistant(text("so far so good")), user("notes: " + "n" * notes_chars)]
    messages += [assistant(call("toolu_last", n=99)), result("toolu_last", "z" * last_chars)]
    return messages


SMALL_WINDOW = {"context_window": 40_000, "max_tokens": 4_000, "escalated_max_tokens": 8_000}
"""Effective window 32,000: auto-compact at 19,000, blocking limit at 29,000."""


async def test_the_layers_run_in_order_0_to_4_in_one_pass() -> None:
    model = FakeModel([], then=summariser_or(FakeResponse.of(text("done"))))
    session = ContextSession()
    history = work_history(12, 2_400, 55_000, 30_000)
    run = run_with(
        history,
        model,
        tools=[FakeTool("read", max_result_size_chars=5_000)],
        session=session,
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
    acted = context_events(events)
    assert [e.layer for e in acted] == list(LAYER_ORDER)
    assert all(e.turn == 1 for e in acted)
    budget, snip, micro, collapse, auto = acted
    assert isinstance(snip, ContextBoundary) and snip.messages_removed == 12
    assert (
        isinstance(budget, Compaction) and isinstance(micro, Compaction) and isinstance(collapse, Compaction)
    )
    # each layer starts from the estimate the previous one left (snip's freed tokens included)
    assert micro.tokens_before == budget.tokens_after - snip.tokens_freed
    assert collapse.tokens_before == micro.tokens_after
    assert isinstance(auto, Compaction) and auto.tokens_before == collapse.tokens_after
    assert isinstance(auto, Compaction) and auto.outcome is Outcome.APPLIED and auto.usage is not None
    assert auto.tokens_after < 19_000 <= auto.tokens_before
    assert run.terminal == Completed("end_turn")
    assert (main_calls(model), model.calls("compact")) == (1, 1)
    summarising, sent = model.requests
    assert (
        summarising.source == "compact"
        and "tools" not in summarising.body
        and "thinking" not in summarising.body
    )
    assert summarising.body["max_tokens"] == ContextConfig().compact_max_tokens
    assert [m["role"] for m in summarising.body["messages"]] == ["user"]
    messages = sent.body["messages"]
    assert pairing_violations(messages) == []
    assert messages[0]["content"][0]["text"] == "task"  # the task is kept verbatim
    assert SUMMARY in messages[0]["content"][1]["text"]
    assert messages[-1]["content"][0]["tool_use_id"] == "toolu_last"  # the protected tail
    assert session.store.get("toolu_last") is not None and session.store.get("toolu_8") is not None
    assert run.state.context.compactions == 1


def spans_history(pairs: int, result_chars: int) -> list[Message]:
    messages = [user("task")]
    for i in range(pairs):
        messages += [assistant(call(f"toolu_{i}", path=f"f{i}.py")), result(f"toolu_{i}", "r" * result_chars)]
    return messages


async def test_collapse_can_make_auto_compact_a_no_op() -> None:
    model = FakeModel([], then=summariser_or(FakeResponse.of(text("done"))))
    no_micro = ContextConfig(microcompact_keep_results=1_000)
    run = run_with(
        spans_history(30, 2_000), model, tools=[FakeTool("read")], context=no_micro, **SMALL_WINDOW
    )
    events = await run_to_end(run)
    acted = context_events(events)
    assert [e.layer for e in acted] == [Layer.COLLAPSE]
    collapse = acted[0]
    assert isinstance(collapse, Compaction) and collapse.tokens_before >= 19_000 > collapse.tokens_after
    assert model.calls("compact") == 0  # auto-compact had nothing left to do
    assert run.terminal == Completed("end_turn")
    sent = model.requests[0].body["messages"]
    assert pairing_violations(sent) == []
    assert sent[1]["content"][0]["text"].startswith("[Collapsed context")
    assert "read" in sent[1]["content"][0]["text"] and "f0.py" in sent[1]["content"][0]["text"]


async def test_compaction_rescues_a_history_past_the_blocking_limit() -> None:
    """The blocking limit is checked after the layers: a history above it is compacted, not refused."""
    model = FakeModel([], then=summariser_or(FakeResponse.of(text("done"))))
    history = conversation(6, chars=15_000)  # ~ 60,000 estimated tokens, blocking limit 29,000
    run = run_with(history, model, **SMALL_WINDOW)
    await run.wait()
    assert run.terminal == Completed("end_turn")
    assert model.calls("compact") == 1 and main_calls(model) == 1


# --- death spirals ------------------------------------------------------------------------------


async def test_always_prompt_too_long_is_two_model_calls_and_one_summary() -> None:
    model = FakeModel([], then=summariser_or(prompt_too_long()))
    run = run_with(conversation(3, chars=200), model)
    events = await run_to_end(run)
    assert isinstance(run.terminal, PromptTooLong) and run.terminal.error_kind == "prompt_too_long"
    assert (main_calls(model), model.calls("compact")) == (2, 1)
    assert run.state.transitions == (ReactiveCompactRetry("prompt_too_long", 200_000),)
    errors = [e for e in events if isinstance(e, StreamEvent) and e.event["type"] == "error"]
    assert len(errors) == 1 and events.index(errors[0]) == len(events) - 1  # shown only at the very end
    assert not any(isinstance(e, AssistantMessage) for e in events)


async def test_a_summariser_that_always_fails_is_called_three_times_in_a_ten_run_session() -> None:
    clock = VirtualClock()

    def answer(request: ModelRequest) -> FakeResponse:
        if request.source == "compact":
            return FakeResponse.http_error(500, "api_error", "Internal server error")
        return FakeResponse.of(text("done"))

    model = FakeModel([], then=answer)
    session = ContextSession()
    outcomes: list[list[Outcome]] = []
    history = conversation(5, chars=13_000)  # ~ 43,000 estimated: above auto-compact, below blocking
    config = {"context_window": 60_000, "max_tokens": 4_000, "escalated_max_tokens": 8_000}
    for _ in range(10):
        run = run_with(history, model, session=session, clock=clock, **config)
        events = await run_to_end(run)
        assert run.terminal == Completed("end_turn")
        outcomes.append([e.outcome for e in context_events(events) if isinstance(e, Compaction)])
    assert model.calls("compact") == 3 and main_calls(model) == 10
    assert outcomes[:3] == [[Outcome.FAILED]] * 3
    assert outcomes[3:] == [[Outcome.BREAKER_OPEN]] * 7
    assert session.breaker.is_open and session.breaker.trips == 1
    clock.advance(ContextConfig().breaker_cooldown_s)  # the cool-down: one attempt, which fails
    for _ in range(2):
        await run_with(history, model, session=session, clock=clock, **config).wait()
    assert model.calls("compact") == 4 and session.breaker.trips == 2


async def test_a_summarisation_call_that_reaches_the_token_limit_is_the_last_call() -> None:
    """The guardrails are checked before each call: the summary (62,000 billed tokens) reached the
    50,000 limit, so the request it prepared is not sent (it was, and the run spent 92,100)."""

    def answer(request: ModelRequest) -> FakeResponse:
        if request.source == "compact":
            return FakeResponse.of(text(SUMMARY), usage={"input_tokens": 60_000, "output_tokens": 2_000})
        return FakeResponse.of(text("done"), usage={"input_tokens": 30_000, "output_tokens": 100})

    model = FakeModel([], then=answer)
    run = run_with(conversation(6, chars=15_000), model, max_total_tokens=50_000, **SMALL_WINDOW)
    events = await run_to_end(run)
    assert isinstance(run.terminal, Guardrail) and run.terminal.kind is GuardrailKind.TOKENS
    assert [r.source for r in model.requests] == ["compact"]
    assert run.state.usage.billed == 62_000
    (compaction,) = [e for e in context_events(events) if isinstance(e, Compaction)]
    assert compaction.outcome is Outcome.APPLIED and pairing_violations(run.state.messages) == []


async def test_a_big_protected_tail_does_not_make_every_turn_summarise_a_small_head() -> None:
    """Each result is 20,800 characters (~6,900 estimated tokens): the last two turns alone are over
    the auto-compact threshold (10,904 in a 30,000 window), collapse folds each older turn into a
    digest, and what is left to summarise is the digest and the previous summary. Summarising that
    freed nothing (the summary was as long) and cost a call and a cache write every turn."""
    calls: list[int] = []

    def answer(request: ModelRequest) -> FakeResponse:
        if request.source == "compact":
            return FakeResponse.of(text("Summary: the agent read the log " + "s" * 800))
        calls.append(len(calls))
        usage = {"input_tokens": len(orjson.dumps(request.body)) // 4, "output_tokens": 50}
        if len(calls) > 12:
            return FakeResponse.of(text("done"), usage=usage)
        return FakeResponse.of(text("next part"), call(f"toolu_{len(calls)}", part=len(calls)), usage=usage)

    model = FakeModel([], then=answer)
    reader = FakeTool("read", result="line of the log\n" * 1_300)
    window = {"context_window": 30_000, "max_tokens": 4_000, "escalated_max_tokens": 8_192}
    run = run_with("read the whole log", model, tools=[reader], max_turns=30, **window)
    events = await run_to_end(run)
    assert run.terminal == Completed("end_turn") and len(calls) == 13
    assert model.calls("compact") == 0  # it was 10: one per turn from the fourth on
    assert all(e.layer is Layer.COLLAPSE for e in context_events(events))
    assert pairing_violations(run.state.messages) == []


async def test_reactive_compact_then_a_blocking_stop_hook_then_prompt_too_long_compacts_once() -> None:
    hook_calls: list[int] = []

    async def lint(messages: tuple[Message, ...]) -> StopHookResult:
        hook_calls.append(len(messages))
        return StopHookResult(blocking_errors=("the linter found 3 errors",))

    model = FakeModel(
        [prompt_too_long(), FakeResponse.of(text(SUMMARY)), FakeResponse.of(text("done")), prompt_too_long()]
    )
    run = run_with(conversation(3, chars=200), model, stop_hooks=(lint,))
    await run.wait()
    assert isinstance(run.terminal, PromptTooLong)
    assert [r.source for r in model.requests] == ["sdk", "compact", "sdk", "sdk"]
    assert model.calls("compact") == 1  # the flag survived the stop-hook retry
    assert run.state.transitions == (
        ReactiveCompactRetry("prompt_too_long", 200_000),
        StopHookBlocking(("the linter found 3 errors",)),
    )
    assert len(hook_calls) == 1
    assert "the linter found 3 errors" in orjson.dumps(model.requests[3].body["messages"]).decode()


async def test_no_stop_hook_after_an_api_error() -> None:
    hook_calls: list[int] = []

    async def hook(messages: tuple[Message, ...]) -> StopHookResult:
        hook_calls.append(len(messages))
        return StopHookResult(blocking_errors=("never",))

    for failing in (FakeResponse.http_error(529, "overloaded_error", "Overloaded"), prompt_too_long()):
        model = FakeModel([failing], then=failing)
        run = run_with("go", model, stop_hooks=(hook,))
        await run.wait()
        assert isinstance(run.terminal, ModelError | PromptTooLong)
    assert hook_calls == []


async def test_a_stop_hook_can_prevent_continuation() -> None:
    async def stop(messages: tuple[Message, ...]) -> StopHookResult:
        return StopHookResult(prevent_continuation=True, message="budget review")

    run = run_with("go", FakeModel([FakeResponse.of(text("done"))]), stop_hooks=(stop,))
    await run.wait()
    assert run.terminal == loop.StopHookPrevented("budget review")
    assert run.messages[-1] == {"role": "assistant", "content": [text("done")]}


# --- withholding, the ladder's rungs in runs ----------------------------------------------------


async def test_a_recovered_prompt_too_long_never_reaches_the_consumer() -> None:
    model = FakeModel([prompt_too_long()], then=summariser_or(FakeResponse.of(text("fixed"))))
    run = run_with(conversation(3, chars=200), model)
    events = await run_to_end(run)
    assert run.terminal == Completed("end_turn")
    assert not any(isinstance(e, StreamEvent) and e.event["type"] == "error" for e in events)
    assistants = [e for e in events if isinstance(e, AssistantMessage)]
    assert [a.message["content"] for a in assistants] == [[text("fixed")]]
    transitions = [e.transition for e in events if isinstance(e, TransitionEvent)]
    assert transitions == [ReactiveCompactRetry("prompt_too_long", 200_000)]
    retry = model.requests[-1].body["messages"]
    assert retry[0]["content"][0]["text"].startswith("question 0")  # the first message, kept
    assert SUMMARY in retry[0]["content"][-1]["text"]
    assert retry[-1]["content"][0]["text"] == "now fix the bug"


async def test_a_collapse_drain_comes_before_reactive_compaction() -> None:
    model = FakeModel(
        [FakeResponse.of(tool_use("read", {"n": i})) for i in range(4)]
        + [prompt_too_long(), prompt_too_long()],
        then=summariser_or(FakeResponse.of(text("done"))),
    )
    run = run_with("go", model, tools=[FakeTool("read", result="x" * 3_000)])
    events = await run_to_end(run)
    assert run.terminal == Completed("end_turn")
    assert [t.reason for t in run.state.transitions] == ["next_turn"] * 4 + [
        "collapse_drain",
        "reactive_compact_retry",
    ]
    drain = [e for e in context_events(events) if e.layer is Layer.COLLAPSE]
    assert len(drain) == 1 and "(drain)" in drain[0].detail
    assert model.calls("compact") == 1


async def test_model_context_window_exceeded_compacts_and_continues() -> None:
    exceeded = FakeResponse.of(text("partial"), stop_reason="model_context_window_exceeded")
    model = FakeModel([exceeded, FakeResponse.of(text(SUMMARY)), FakeResponse.of(text("complete answer"))])
    run = run_with(conversation(4, chars=300), model)
    events = await run_to_end(run)
    assert run.terminal == Completed("end_turn")
    assert run.state.transitions == (ReactiveCompactRetry("model_context_window_exceeded"),)
    assert [a.message["content"] for a in events if isinstance(a, AssistantMessage)] == [
        [text("complete answer")]
    ]
    assert model.requests[1].source == "compact"


async def test_the_thinking_downgrade_fits_the_output_next_to_the_prompt() -> None:
    overflow = FakeResponse.http_error(
        400,
        "invalid_request_error",
        "input length and `max_tokens` exceed context limit: 190000 + 16000 > 200000, decrease input "
        "length or `max_tokens` and try again",
    )
    model = FakeModel([overflow, FakeResponse.of(thinking("short"), text("done"))])
    run = run_with("go", model, max_tokens=16_000, thinking_budget_tokens=8_000)
    await run.wait()
    assert run.terminal == Completed("end_turn")
    assert run.state.transitions == (ThinkingDowngrade("context_overflow", 9_000, 7_976),)
    retried = model.requests[1].body
    assert retried["max_tokens"] == 9_000 and retried["thinking"] == {
        "type": "enabled",
        "budget_tokens": 7_976,
    }


async def test_without_thinking_after_the_downgrade_the_history_has_no_thinking_blocks() -> None:
    model = FakeModel(
        [FakeResponse.of(thinking("plan"), tool_use("read", {})), prompt_too_long(), prompt_too_long()],
        then=summariser_or(FakeResponse.of(text("done"))),
    )
    run = run_with("go", model, tools=[FakeTool("read")], max_tokens=16_000, thinking_budget_tokens=4_000)
    await run.wait()
    assert run.terminal == Completed("end_turn")
    assert [t.reason for t in run.state.transitions] == [
        "next_turn",
        "reactive_compact_retry",
        "thinking_downgrade",
    ]
    last = model.requests[-1].body
    assert "thinking" not in last
    assert thinking_violations(run.messages, last["messages"], thinking_enabled=False) == []
    assert pairing_violations(last["messages"]) == []


# --- an upstream whose real limit is far below the configured window ------------------------------


def upstream_tokens(request: ModelRequest) -> int:
    """The emulators' rule: four bytes per token over the whole request."""
    return -(-len(orjson.dumps(request.body)) // 4)


@pytest.mark.parametrize("collapse", [True, False], ids=["collapse", "summaries"])
async def test_an_upstream_limit_far_below_the_configured_window_is_learned_and_the_task_completes(
    collapse: bool,
) -> None:
    """Configured for a 200k window, the upstream refuses anything above 30k ("Input is too long.",
    as Bedrock says it): the first refusal is recovered (a collapse drain, or reactive compaction
    whose summarisation request fits), the learned limit keeps every later request under 30k."""
    real_limit = 30_000
    steps = 40
    refused: list[int] = []
    served: list[int] = []
    done = {"steps": 0}

    def upstream(request: ModelRequest) -> FakeResponse:
        size = upstream_tokens(request)
        if size > real_limit:
            refused.append(size)
            return FakeResponse.http_error(400, "invalid_request_error", "Input is too long.")
        served.append(size)
        usage = {"input_tokens": size, "output_tokens": 30}
        if request.source == "compact":
            return FakeResponse.of(text(SUMMARY), usage=usage)
        done["steps"] += 1
        if done["steps"] <= steps:
            return FakeResponse.of(tool_use("read", {"path": f"f{done['steps']}.py"}), usage=usage)
        return FakeResponse.of(text("all files read"), usage=usage)

    model = FakeModel([], then=upstream)
    reads = FakeTool("read", result=lambda tool_input: f"contents of {tool_input['path']}\n" + "y" * 6_000)
    run = run_with(
        "read every file",
        model,
        tools=[reads],
        max_turns=100,
        max_repeated_tool_calls=None,
        context=ContextConfig(collapse=collapse),
    )
    await run.wait()
    assert run.terminal == Completed("end_turn")
    assert len(reads.calls) == steps
    assert len(refused) == 1  # the first refusal was recovered; the learned limit kept the rest under it
    learned = run.state.context.learned_limit
    assert learned is not None and learned < refused[0]
    assert learned == max(size for size in served if size < refused[0])  # the largest prompt accepted
    recoveries = [t for t in run.state.transitions if not isinstance(t, NextTurn)]
    rung = CollapseDrain if collapse else ReactiveCompactRetry
    assert recoveries == [rung("input_too_long", learned)]
    assert max(served) <= real_limit
    assert (model.calls("compact") > 0) is not collapse


# --- microcompact's server variant, and reading stored results back --------------------------------


async def test_server_side_clearing_is_requested_and_reported() -> None:
    cleared = {
        "applied_edits": [
            {"type": "clear_tool_uses_20250919", "cleared_tool_uses": 3, "cleared_input_tokens": 5_000}
        ]
    }
    usage = {"input_tokens": 100, "cache_read_input_tokens": 20_000, "output_tokens": 20}
    model = FakeModel(
        [
            FakeResponse.of(tool_use("read", {}), usage=usage, context_management=cleared),
            FakeResponse.of(text("done"), usage=usage),
        ]
    )
    run = run_with("go", model, tools=[FakeTool("read")], context=ContextConfig(server_context_edits=True))
    events = await run_to_end(run)
    assert run.terminal == Completed("end_turn")
    body = model.requests[0].body
    assert "context-management-2025-06-27" in model.requests[0].betas
    edit = body["context_management"]["edits"][0]
    assert edit["type"] == "clear_tool_uses_20250919" and edit["keep"] == {"type": "tool_uses", "value": 8}
    reported = [e for e in context_events(events) if isinstance(e, Compaction)]
    assert [(e.layer, e.outcome, e.tokens_before, e.tokens_after) for e in reported] == [
        (Layer.MICROCOMPACT, Outcome.SERVER_APPLIED, 25_100, 20_100)
    ]


async def test_the_server_variant_is_chosen_by_the_callers_upstream() -> None:
    class OnProvider(FakeModel):
        def __init__(self, name: str) -> None:
            super().__init__([FakeResponse.of(text("done"))])
            self.provider = SimpleNamespace(name=name)

    for name, expected in (("anthropic", True), ("foundry", True), ("bedrock", True), ("vertex", False)):
        model = OnProvider(name)
        await run_with("go", model).wait()
        assert ("context_management" in model.requests[0].body) is expected, name
    plain = FakeModel([FakeResponse.of(text("done"))])
    await run_with("go", plain).wait()
    assert "context_management" not in plain.requests[0].body


async def test_a_shortened_result_is_read_back_whole() -> None:
    body = "".join(f"line {i:05d}\n" for i in range(2_000))  # 22,000 characters
    model = FakeModel(
        [
            FakeResponse.of(tool_use("cat", {}, id="toolu_big")),
            FakeResponse.of(
                tool_use("read_tool_result", {"tool_use_id": "toolu_big", "offset": 11_000, "limit": 22})
            ),
            FakeResponse.of(text("done")),
        ]
    )
    run = run_with("go", model, tools=[FakeTool("cat", result=body, max_result_size_chars=2_000)])
    await run.wait()
    assert run.terminal == Completed("end_turn")
    shortened = model.requests[1].body["messages"][-1]["content"][0]["content"]
    assert len(shortened) < 2_000 and 'read_tool_result(tool_use_id="toolu_big"' in shortened
    assert shortened.startswith("line 00000")
    read_back = model.requests[2].body["messages"][-1]["content"][0]["content"]
    assert body[11_000:11_022] in read_back and "characters 11000-11022 of 22000" in read_back
    assert run.state.transitions == (NextTurn(1), NextTurn(1))


async def test_a_multi_megabyte_result_cut_to_an_excerpt_does_not_end_the_run() -> None:
    # The result's bytes were added at 3 per token and freed at 4: the estimate kept most of the
    # 3 MB after layer 0 cut it, and the run ended BlockingLimit before the next request.
    model = FakeModel([FakeResponse.of(tool_use("cat", {}, id="toolu_big"))], then=FakeResponse.of(text("done")))
    run = run_with("go", model, tools=[FakeTool("cat", result="x" * 3_000_000, max_result_size_chars=50_000)])
    events = await run_to_end(run)
    assert run.terminal == Completed("end_turn")
    assert main_calls(model) == 2 and model.calls("compact") == 0
    sent = model.requests[1].body["messages"][-1]["content"][0]["content"]
    assert len(sent) < 50_000 and 'read_tool_result(tool_use_id="toolu_big"' in sent
    assert [e.layer for e in context_events(events)] == [Layer.TOOL_RESULT_BUDGET]
    assert run.state.context_tokens < 10_000


async def test_layers_off_sends_the_history_as_it_is() -> None:
    model = FakeModel([FakeResponse.of(tool_use("cat", {})), FakeResponse.of(text("done"))])
    run = run_with(
        "go",
        model,
        tools=[FakeTool("cat", result="x" * 5_000, max_result_size_chars=1_000)],
        context=ContextConfig(enabled=False),
    )
    await run.wait()
    assert [t["name"] for t in model.requests[0].body["tools"]] == ["cat"]
    assert "[Result truncated" in model.requests[1].body["messages"][-1]["content"][0]["content"]


async def test_a_drain_is_offered_only_when_there_is_tool_work() -> None:
    model = FakeModel([prompt_too_long()], then=summariser_or(FakeResponse.of(text("ok"))))
    run = run_with(conversation(3, chars=100), model)
    await run.wait()
    assert run.state.transitions == (ReactiveCompactRetry("prompt_too_long", 200_000),)  # no drain rung
    assert CollapseDrain("prompt_too_long") not in run.state.transitions
    assert model.calls("compact") == 1
