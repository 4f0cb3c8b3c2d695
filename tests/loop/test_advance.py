"""Building the next state: a complete new value per transition, the original untouched."""

from __future__ import annotations

from loop.advance import CONTINUE_PROMPT, advance, conclude, interrupt, record_response, tool_signature
from loop.messages import INTERRUPTED_RESULT_TEXT, NOT_EXECUTED_RESULT_TEXT, tool_result_block, user_message
from loop.outcome import ApiErrorInfo, ToolUse, TurnOutcome
from loop.state import LoopState
from loop.transitions import (
    Completed,
    MaxOutputTokensEscalate,
    MaxOutputTokensRecovery,
    ModelError,
    NextTurn,
    PauseTurnResume,
    PromptTooLong,
    Refusal,
)
from loop.usage import TokenUsage
from tests.loop.support import pairing_violations

PROMPT = user_message("go")
START = LoopState(messages=(PROMPT,), started_at=0.0)
TEXT = {"type": "text", "text": "partial answer"}
SIGNED = {"type": "thinking", "thinking": "hmm", "signature": "sig"}


def call(
    id: str, name: str = "read", tool_input: dict[str, object] | None = None
) -> tuple[dict[str, object], ToolUse]:
    payload = tool_input if tool_input is not None else {"path": "a"}
    return {"type": "tool_use", "id": id, "name": name, "input": payload}, ToolUse(id, name, dict(payload))


def test_record_response_counts_the_turn_and_its_tokens() -> None:
    usage = TokenUsage(
        input_tokens=10, output_tokens=5, cache_read_input_tokens=100, cache_creation_input_tokens=7
    )
    state = record_response(START, TurnOutcome(usage=usage, complete=True))
    assert (state.turn_count, state.usage, state.context_tokens, state.context_message_count) == (
        1,
        usage,
        122,
        2,
    )
    again = record_response(state, TurnOutcome(usage=usage, complete=True))
    assert again.usage.total == 2 * usage.total and again.turn_count == 2
    assert START.turn_count == 0  # never poked


def test_next_turn_appends_the_turn_and_one_results_message() -> None:
    block, tool_use = call("toolu_1")
    outcome = TurnOutcome(content=(TEXT, block), stop_reason="tool_use", tool_uses=(tool_use,), complete=True)
    state = LoopState(
        messages=(PROMPT,), started_at=0.0, max_output_tokens_override=64_000, max_output_recovery_count=2
    )
    result = tool_result_block("toolu_1", "file body")
    after = advance(state, NextTurn(1), outcome, [result])
    assert after.messages == (
        PROMPT,
        {"role": "assistant", "content": [TEXT, block]},
        {"role": "user", "content": [result]},
    )
    assert after.max_output_tokens_override is None and after.max_output_recovery_count == 0
    assert after.transition == NextTurn(1) and after.transitions == (NextTurn(1),)
    assert state.messages == (PROMPT,)


def test_pause_turn_sends_the_assistant_turn_back() -> None:
    outcome = TurnOutcome(content=(TEXT,), stop_reason="pause_turn", complete=True)
    after = advance(START, PauseTurnResume(), outcome)
    assert after.messages == (PROMPT, {"role": "assistant", "content": [TEXT]})
    assert after.transition == PauseTurnResume()


def test_escalation_discards_the_truncated_response() -> None:
    block, tool_use = call("toolu_cut")
    outcome = TurnOutcome(
        content=(TEXT, block), stop_reason="max_tokens", tool_uses=(tool_use,), complete=True
    )
    after = advance(START, MaxOutputTokensEscalate(64_000), outcome)
    assert after.messages == START.messages
    assert after.max_output_tokens_override == 64_000


def test_recovery_keeps_the_partial_turn_without_its_calls_and_asks_to_continue() -> None:
    block, tool_use = call("toolu_cut")
    outcome = TurnOutcome(
        content=(SIGNED, TEXT, block), stop_reason="max_tokens", tool_uses=(tool_use,), complete=True
    )
    state = LoopState(messages=(PROMPT,), started_at=0.0, max_output_tokens_override=64_000)
    after = advance(state, MaxOutputTokensRecovery(1), outcome)
    assert after.messages == (
        PROMPT,
        {"role": "assistant", "content": [SIGNED, TEXT]},
        user_message(CONTINUE_PROMPT),
    )
    assert after.max_output_recovery_count == 1 and after.max_output_tokens_override == 64_000
    assert pairing_violations(after.messages) == []


def test_recovery_of_a_response_that_was_only_a_call_keeps_no_assistant_message() -> None:
    block, tool_use = call("toolu_cut")
    outcome = TurnOutcome(
        content=(SIGNED, block), stop_reason="max_tokens", tool_uses=(tool_use,), complete=True
    )
    after = advance(START, MaxOutputTokensRecovery(1), outcome)
    assert after.messages == (PROMPT, user_message(CONTINUE_PROMPT))


def test_error_streak_counts_turns_where_every_call_failed() -> None:
    block, tool_use = call("toolu_1")
    outcome = TurnOutcome(content=(block,), stop_reason="tool_use", tool_uses=(tool_use,), complete=True)
    failed = [tool_result_block("toolu_1", "boom", is_error=True)]
    state = advance(START, NextTurn(1), outcome, failed)
    state = advance(state, NextTurn(1), outcome, failed)
    assert state.consecutive_error_turns == 2
    state = advance(state, NextTurn(1), outcome, [tool_result_block("toolu_1", "fine")])
    assert state.consecutive_error_turns == 0


def test_repetition_counts_identical_calls_in_a_row_across_and_within_turns() -> None:
    a1, use_a1 = call("t1", "read", {"path": "a", "n": 1})
    a2, use_a2 = call("t2", "read", {"n": 1, "path": "a"})  # same input, other key order
    b, use_b = call("t3", "read", {"path": "b"})
    ok = [tool_result_block("t", "ok")]
    state = advance(
        START, NextTurn(2), TurnOutcome(content=(a1, a2), tool_uses=(use_a1, use_a2), complete=True), ok
    )
    assert state.repeated_tool_calls == 2 and state.last_tool_signature == tool_signature(use_a1)
    state = advance(state, NextTurn(1), TurnOutcome(content=(a1,), tool_uses=(use_a1,), complete=True), ok)
    assert state.repeated_tool_calls == 3
    state = advance(state, NextTurn(1), TurnOutcome(content=(b,), tool_uses=(use_b,), complete=True), ok)
    assert state.repeated_tool_calls == 1


def test_conclude_keeps_a_finished_answer() -> None:
    outcome = TurnOutcome(content=(TEXT,), stop_reason="end_turn", complete=True)
    assert conclude(START, Completed("end_turn"), outcome).messages == (
        PROMPT,
        {"role": "assistant", "content": [TEXT]},
    )
    refusal = TurnOutcome(content=(TEXT,), stop_reason="refusal", complete=True)
    assert conclude(START, Refusal(None), refusal).messages[-1] == {"role": "assistant", "content": [TEXT]}


def test_conclude_answers_the_calls_of_a_response_that_broke_mid_stream() -> None:
    block, tool_use = call("toolu_1")
    outcome = TurnOutcome(
        content=(TEXT, block), tool_uses=(tool_use,), error=ApiErrorInfo("overloaded_error", "x")
    )
    final = conclude(START, ModelError("overloaded_error", "x"), outcome)
    assert final.messages[-1] == {
        "role": "user",
        "content": [tool_result_block("toolu_1", NOT_EXECUTED_RESULT_TEXT, is_error=True)],
    }
    assert pairing_violations(final.messages) == []


def test_conclude_drops_responses_the_loop_gave_up_on() -> None:
    outcome = TurnOutcome(content=(TEXT,), stop_reason="model_context_window_exceeded", complete=True)
    assert conclude(START, PromptTooLong("x"), outcome) == START


def test_interrupt_keeps_finished_results_and_marks_the_rest() -> None:
    first, use_1 = call("toolu_1")
    second, use_2 = call("toolu_2")
    outcome = TurnOutcome(content=(first, second, SIGNED), tool_uses=(use_1, use_2))
    done = tool_result_block("toolu_1", "body")
    final = interrupt(START, outcome, {"toolu_1": done})
    assert final.messages[1] == {"role": "assistant", "content": [first, second]}  # no trailing thinking
    assert final.messages[2]["content"] == [
        done,
        tool_result_block("toolu_2", INTERRUPTED_RESULT_TEXT, is_error=True),
    ]
    assert pairing_violations(final.messages) == []
