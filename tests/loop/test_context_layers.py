"""The context layers one by one, as the pure functions they are, and their helpers."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from loop.advance import advance
from loop.context import autocompact, budget, collapse, microcompact, snip
from loop.context.config import ContextConfig
from loop.context.errors import ContextErrorKind, classify
from loop.context.kinds import Layer, Outcome
from loop.context.result import LayerResult, StoredText
from loop.context.session import CircuitBreaker, ToolResultStore
from loop.context.settings import ContextSettings, LayerState
from loop.context.state import ContextState, Pending
from loop.context.transcript import render
from loop.decide import after_stop_hooks
from loop.events import Compaction, ContextBoundary
from loop.outcome import ApiErrorInfo, TurnOutcome
from loop.state import LoopState
from loop.stop_hooks import StopHookResult
from loop.testing import VirtualClock
from loop.tools.base import ToolContext, ToolError
from loop.tools.builtin.read_tool_result import ReadToolResult, ReadToolResultInput
from loop.transitions import (
    CollapseDrain,
    NextTurn,
    ReactiveCompactRetry,
    StopHookBlocking,
    StopHookPrevented,
    ThinkingDowngrade,
)
from tests.loop.support import pairing_violations


def settings(**config: Any) -> ContextSettings:
    caps = config.pop("caps", {"read": 1_000, "exempt": None})
    return ContextSettings(
        ContextConfig(**config), effective_window=32_000, blocking_buffer_tokens=3_000, tool_caps=caps
    )


def user(value: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": value}]}


def pair(i: int, content: Any, name: str = "read") -> list[dict[str, Any]]:
    return [
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": f"t{i}", "signature": f"s{i}"},
                {"type": "tool_use", "id": f"toolu_{i}", "name": name, "input": {"i": i}},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": content}],
        },
    ]


def history(n: int, chars: int, name: str = "read") -> tuple[dict[str, Any], ...]:
    messages = [user("task")]
    for i in range(n):
        messages += pair(i, f"{i}:" + "x" * chars, name)
    return tuple(messages)


STATE = LayerState(turn=3, tokens=25_000)


# --- errors ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "kind", "limit"),
    [
        (
            ApiErrorInfo("invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum", 400),
            ContextErrorKind.PROMPT_TOO_LONG,
            200_000,
        ),
        (
            ApiErrorInfo("invalid_request_error", "prompt is too long", 400),
            ContextErrorKind.PROMPT_TOO_LONG,
            None,
        ),
        (
            ApiErrorInfo("request_too_large", "Request exceeds the maximum allowed number of bytes.", 413),
            ContextErrorKind.REQUEST_TOO_LARGE,
            None,
        ),
        (
            ApiErrorInfo("invalid_request_error", "Input is too long.", 400),
            ContextErrorKind.INPUT_TOO_LONG,
            None,
        ),
        (
            ApiErrorInfo("invalid_request_error", "Input is too long for requested model.", 400),
            ContextErrorKind.INPUT_TOO_LONG,
            None,
        ),
        (
            ApiErrorInfo(
                "invalid_request_error", "The request size (31457281 bytes) exceeds 30.000MB limit.", 400
            ),
            ContextErrorKind.INPUT_TOO_LONG,
            None,
        ),
        (
            ApiErrorInfo(
                "invalid_request_error",
                "input length and `max_tokens` exceed context limit: 178959 + 64000 > 200000, decrease input "
                "length or `max_tokens` and try again",
                400,
            ),
            ContextErrorKind.OUTPUT_OVERFLOW,
            200_000,
        ),
    ],
)
def test_classify_recognises_every_too_long_shape(
    error: ApiErrorInfo, kind: ContextErrorKind, limit: int | None
) -> None:
    found = classify(error)
    assert found is not None and found.kind is kind and found.limit == limit


@pytest.mark.parametrize(
    "error",
    [
        ApiErrorInfo("invalid_request_error", "messages: Field required", 400),
        ApiErrorInfo("overloaded_error", "Overloaded", 529),
        ApiErrorInfo("api_error", "prompt is too long", 500),
    ],
)
def test_other_errors_are_not_context_errors(error: ApiErrorInfo) -> None:
    assert classify(error) is None


# --- layer 0 ----------------------------------------------------------------------------------------


def test_budget_excerpts_and_stores_what_exceeds_a_tools_cap() -> None:
    messages = history(2, 5_000)
    result = budget.apply(messages, STATE, settings())
    assert result.layer is Layer.TOOL_RESULT_BUDGET
    shortened = result.messages[2]["content"][0]["content"]
    assert len(shortened) <= 1_000 and shortened.startswith("0:xxx") and shortened.rstrip().endswith(".]")
    assert 'read_tool_result(tool_use_id="toolu_0"' in shortened
    assert [s.tool_use_id for s in result.stored] == ["toolu_0", "toolu_1"]
    assert result.stored[0].text == messages[2]["content"][0]["content"]
    assert isinstance(result.event, Compaction) and result.event.outcome is Outcome.APPLIED
    assert result.tokens_freed == (2 * (len(messages[2]["content"][0]["content"]) - len(shortened))) // 4
    assert result.messages[1] is messages[1]  # only tool_result blocks change
    assert budget.apply(result.messages, STATE, settings()).messages is result.messages  # idempotent


def test_budget_leaves_exempt_tools_and_small_results_alone() -> None:
    messages = history(2, 50_000, name="exempt")
    assert budget.apply(messages, STATE, settings()).messages is messages
    small = history(2, 100)
    assert budget.apply(small, STATE, settings()).messages is small


def test_budget_caps_the_results_of_one_message_together() -> None:
    results = [{"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": "y" * 9_000} for i in range(4)]
    calls = [{"type": "tool_use", "id": f"toolu_{i}", "name": "grep", "input": {}} for i in range(4)]
    messages = (user("task"), {"role": "assistant", "content": calls}, {"role": "user", "content": results})
    config = settings(caps={"grep": 10_000}, tool_results_per_message_chars=20_000)
    result = budget.apply(messages, STATE, config)
    sizes = [len(b["content"]) for b in result.messages[2]["content"]]
    assert sum(sizes) <= 20_000 and len(result.stored) >= 2


def test_budget_never_makes_a_result_longer_than_it_was() -> None:
    """An excerpt carries a note of ~250 characters: a result shorter than excerpt + note is left
    as it is (it was replaced by something longer, stored, and reported as a compaction)."""
    results = [{"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": "y" * 300} for i in range(1_000)]
    calls = [{"type": "tool_use", "id": f"toolu_{i}", "name": "stat", "input": {}} for i in range(1_000)]
    many = (user("task"), {"role": "assistant", "content": calls}, {"role": "user", "content": results})
    over = budget.apply(many, STATE, settings(caps={"stat": 50_000}))  # 300,000 chars > 200,000
    assert over.messages is many and over.stored == () and over.event is None
    tiny = (user("task"), *pair(0, "z" * 150, name="tiny"))
    assert budget.apply(tiny, STATE, settings(caps={"tiny": 100})).messages is tiny
    mixed = (user("task"), *pair(0, "z" * 150, name="tiny"), *pair(1, "w" * 5_000, name="tiny"))
    result = budget.apply(mixed, STATE, settings(caps={"tiny": 100}))  # the long one is still cut
    assert result.messages[2] is mixed[2] and [s.tool_use_id for s in result.stored] == ["toolu_1"]


def test_budget_keeps_images_of_a_shortened_result() -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}
    messages = (user("task"), *pair(0, [{"type": "text", "text": "z" * 4_000}, image]))
    content = budget.apply(messages, STATE, settings()).messages[2]["content"][0]["content"]
    assert content[-1] == image and len(content[0]["text"]) <= 1_000


# --- layer 1 ----------------------------------------------------------------------------------------


def test_snip_drops_the_oldest_turns_beyond_the_limit_in_one_batch() -> None:
    messages = history(12, 100)
    result = snip.apply(messages, STATE, settings(snip_max_turns=10, snip_batch_turns=4))
    assert isinstance(result.event, ContextBoundary)
    assert result.event.messages_removed == 12 and result.event.tokens_freed == result.tokens_freed > 0
    assert result.messages[0] == messages[0] and result.messages[1:] == messages[13:]
    assert sum(1 for m in result.messages if m["role"] == "assistant") == 6
    assert pairing_violations(list(result.messages)) == []
    assert snip.apply(result.messages, STATE, settings(snip_max_turns=10)).messages is result.messages
    assert snip.apply(messages, STATE, settings(snip_max_turns=None)).messages is messages


# --- layer 2 ----------------------------------------------------------------------------------------


def test_microcompact_clears_old_results_keeping_the_newest() -> None:
    messages = history(10, 3_000, name="grep")
    config = settings(caps={}, microcompact_keep_results=3, microcompact_min_age_turns=2)
    result = microcompact.apply(messages, STATE, config)
    cleared = [
        i
        for i, m in enumerate(result.messages)
        if m["role"] == "user" and "[Old tool result cleared" in str(m)
    ]
    assert len(cleared) == 7 and cleared == [2 * (i + 1) for i in range(7)]
    assert all(result.messages[i] == messages[i] for i in range(len(messages)) if i not in cleared)
    assert [s.tool_use_id for s in result.stored] == [f"toolu_{i}" for i in range(7)]
    placeholder = result.messages[2]["content"][0]["content"]
    assert placeholder.startswith("[Old tool result cleared") and 'tool_use_id="toolu_0"' in placeholder
    assert isinstance(result.event, Compaction) and result.event.layer is Layer.MICROCOMPACT


def test_microcompact_waits_for_its_trigger_and_a_worthwhile_gain() -> None:
    messages = history(10, 3_000)
    quiet = LayerState(turn=3, tokens=5_000)  # trigger: half of the 19,000 auto-compact threshold
    assert microcompact.apply(messages, quiet, settings(caps={})).messages is messages
    small = history(10, 500)
    assert (
        microcompact.apply(small, STATE, settings(caps={}, microcompact_min_free_tokens=5_000)).messages
        is small
    )
    drain = LayerState(turn=3, tokens=5_000, pending=Pending.DRAIN)
    assert microcompact.apply(small, drain, settings(caps={})).messages is not small


def test_the_server_variant_leaves_clearing_to_the_upstream() -> None:
    config = replace(settings(caps={}), server_edits=True)
    messages = history(10, 3_000)
    assert microcompact.apply(messages, STATE, config).messages is messages
    edits = microcompact.server_edits(config, None)
    assert edits == {
        "edits": [
            {
                "type": "clear_tool_uses_20250919",
                "trigger": {"type": "input_tokens", "value": 9_500},
                "keep": {"type": "tool_uses", "value": 8},
                "clear_at_least": {"type": "input_tokens", "value": 1_900},
            }
        ]
    }


# --- layer 3 ----------------------------------------------------------------------------------------


def test_collapse_replaces_the_oldest_spans_until_below_its_target() -> None:
    messages = (
        *history(6, 4_000),
        {"role": "assistant", "content": [{"type": "text", "text": "mid"}]},
        user("more"),
    )
    messages = (*messages, *pair(10, "r" * 4_000), *pair(11, "r" * 4_000))
    config = settings(caps={}, protected_tail_turns=1)
    assert collapse.spans(messages, config) == [(1, 13), (15, 17)]
    result = collapse.apply(messages, LayerState(turn=3, tokens=20_000), config)
    assert isinstance(result.event, Compaction) and result.event.tokens_after <= 16_150
    digest = result.messages[1]
    assert digest["role"] == "user" and digest["content"][0]["text"].startswith("[Collapsed context")
    assert "read(" in digest["content"][0]["text"] and "stored as toolu_0" in digest["content"][0]["text"]
    assert pairing_violations(list(result.messages)) == []
    assert collapse.apply(messages, LayerState(turn=3, tokens=10_000), config).messages is messages


def test_a_drain_collapses_every_span_and_merges_adjacent_digests() -> None:
    messages = (
        *history(3, 100),
        {"role": "assistant", "content": [{"type": "text", "text": "x"}]},
        user("y"),
    )
    messages = (*messages, *pair(5, "a"), *pair(6, "b"), *pair(7, "c"))
    drain = LayerState(turn=3, tokens=100, pending=Pending.DRAIN)
    once = collapse.apply(messages, drain, settings(caps={}, protected_tail_turns=1))
    assert [m["role"] for m in once.messages] == [
        "user",
        "user",
        "assistant",
        "user",
        "user",
        "assistant",
        "user",
    ]
    again = collapse.apply(
        (*once.messages[:-2], *pair(8, "d"), *once.messages[-2:]),
        drain,
        settings(caps={}, protected_tail_turns=1),
    )
    texts = [m["content"][0].get("text", "") for m in again.messages if m["role"] == "user"]
    assert (
        sum(t.startswith("[Collapsed context") for t in texts) == 2
    )  # the new span joined the digest before it


# --- layer 4 ----------------------------------------------------------------------------------------


def test_autocompact_is_due_at_the_threshold_and_keeps_the_task_and_the_tail() -> None:
    messages = history(8, 3_000)
    config = settings(caps={})
    assert isinstance(
        autocompact.plan(messages, LayerState(3, 18_999), config, breaker_open=False), LayerResult
    )
    planned = autocompact.plan(messages, LayerState(3, 19_000), config, breaker_open=False)
    assert isinstance(planned, autocompact.CompactPlan) and planned.layer is Layer.AUTOCOMPACT
    assert planned.first == messages[0] and planned.tail == messages[-4:]
    result = autocompact.complete(planned, "the summary", LayerState(3, 19_000), config)
    assert result.messages[0]["content"][0] == messages[0]["content"][0]
    assert "the summary" in result.messages[0]["content"][1]["text"]
    assert result.messages[1:] == messages[-4:]
    assert isinstance(result.event, Compaction) and result.event.tokens_after < 19_000


def test_autocompact_failures_and_the_open_breaker_leave_the_history_as_it_was() -> None:
    messages = history(8, 3_000)
    config = settings(caps={})
    blocked = autocompact.plan(messages, STATE, config, breaker_open=True)
    assert isinstance(blocked, LayerResult) and blocked.messages is messages
    assert isinstance(blocked.event, Compaction) and blocked.event.outcome is Outcome.BREAKER_OPEN
    planned = autocompact.plan(messages, STATE, config, breaker_open=False)
    assert isinstance(planned, autocompact.CompactPlan)
    failed = autocompact.complete(
        planned, None, STATE, config, failure="api_error: boom", breaker_tripped=True
    )
    assert failed.messages is messages and failed.failure == "api_error: boom"
    assert isinstance(failed.event, Compaction) and failed.event.breaker_tripped


def test_reactive_compaction_without_a_summary_still_drops_the_old_part() -> None:
    messages = history(8, 3_000)
    reactive = LayerState(3, 1_000, pending=Pending.REACTIVE)
    planned = autocompact.plan(messages, reactive, settings(caps={}), breaker_open=True)
    assert isinstance(planned, autocompact.CompactPlan) and planned.layer is Layer.REACTIVE_COMPACT
    result = autocompact.complete(planned, None, reactive, settings(caps={}), failure="circuit breaker open")
    assert isinstance(result.event, Compaction) and result.event.outcome is Outcome.TRUNCATED
    assert len(result.messages) == 5 and "were removed" in result.messages[0]["content"][-1]["text"]


def test_a_previous_summary_is_summarised_again_not_kept() -> None:
    messages = history(8, 3_000)
    config = settings(caps={})
    planned = autocompact.plan(messages, STATE, config, breaker_open=False)
    assert isinstance(planned, autocompact.CompactPlan)
    first = autocompact.complete(planned, "summary one", STATE, config).messages
    grown = (*first, *pair(20, "x" * 20_000), *pair(21, "x" * 3_000), *pair(22, "x" * 3_000))
    again = autocompact.plan(grown, STATE, config, breaker_open=False)
    assert isinstance(again, autocompact.CompactPlan)
    assert again.first == {"role": "user", "content": [{"type": "text", "text": "task"}]}
    assert "summary one" in again.messages[0]["content"][0]["text"]  # in the transcript


def test_a_head_no_larger_than_a_summary_is_not_summarised_unless_the_upstream_refused() -> None:
    config = settings(caps={})  # auto-compact at 19,000; a summary may take 4,096, a gain 1,900
    planned = autocompact.plan(history(8, 3_000), STATE, config, breaker_open=False)
    assert isinstance(planned, autocompact.CompactPlan)
    first = autocompact.complete(planned, "summary one", STATE, config).messages
    grown = (*first, *pair(20, "x" * 3_000), *pair(21, "x" * 20_000), *pair(22, "x" * 20_000))
    skipped = autocompact.plan(grown, STATE, config, breaker_open=False)  # the tail is what is big
    assert isinstance(skipped, LayerResult) and skipped.messages is grown and skipped.event is None
    reactive = LayerState(3, 25_000, pending=Pending.REACTIVE)
    assert isinstance(autocompact.plan(grown, reactive, config, breaker_open=False), autocompact.CompactPlan)


def test_the_transcript_is_shed_to_fit_its_budget() -> None:
    messages = history(30, 6_000)
    for budget_tokens in (100_000, 20_000, 5_000, 800):
        transcript = render(messages, budget_tokens)
        assert len(transcript.text.encode()) <= budget_tokens * 3
    assert render(messages, 100_000).level == 0
    assert render(messages, 800).omitted > 0
    assert "thinking" not in render(messages, 100_000).text  # thinking is never sent to the summariser


# --- session: breaker, store, read_tool_result ------------------------------------------------------


def test_the_breaker_opens_after_three_failures_and_half_opens_after_its_cool_down() -> None:
    breaker = CircuitBreaker()
    assert [breaker.record_failure(0.0, 3) for _ in range(3)] == [False, False, True]
    assert not breaker.allows(599.0, 600.0) and breaker.allows(600.0, 600.0)
    assert breaker.record_failure(600.0, 3) is True and breaker.trips == 2  # half-open failure: open again
    assert not breaker.allows(1_000.0, 600.0)
    breaker.record_success()
    assert breaker.allows(1_000.0, 600.0) and breaker.consecutive_failures == 0


def test_the_store_keeps_the_first_text_and_writes_files(tmp_path: Path) -> None:
    store = ToolResultStore(tmp_path / "results")
    store.put(StoredText("toolu/1", "read", "whole"))
    store.put(StoredText("toolu/1", "read", "excerpt"))
    assert store.get("toolu/1") == StoredText("toolu/1", "read", "whole")
    assert (tmp_path / "results" / "toolu_1.txt").read_text() == "whole"


async def test_read_tool_result_pages_through_a_stored_result() -> None:
    store = ToolResultStore()
    store.put(StoredText("toolu_9", "read", "0123456789" * 10))
    tool = ReadToolResult(store)
    context = ToolContext("toolu_x", 1, VirtualClock())
    page = await tool.call(ReadToolResultInput(tool_use_id="toolu_9", offset=95, limit=20), context)
    assert page == "[read result toolu_9: characters 95-100 of 100]\n56789"
    first = await tool.call(ReadToolResultInput(tool_use_id="toolu_9", limit=10), context)
    assert first.endswith("0123456789\n[90 more characters: call again with offset=10]")
    with pytest.raises(ToolError):
        await tool.call(ReadToolResultInput(tool_use_id="nope"), context)


# --- the recovery transitions build the next state ---------------------------------------------------


def test_recovery_transitions_record_their_rung_and_stop_hooks_keep_them() -> None:
    start = LoopState(messages=(user("go"),), started_at=0.0)
    failed = TurnOutcome(error=ApiErrorInfo("invalid_request_error", "Input is too long.", 400))
    drained = advance(start, CollapseDrain("input_too_long", 40_000), failed)
    assert drained.context.pending is Pending.DRAIN and drained.context.learned_limit == 40_000
    assert drained.messages == start.messages  # the refused turn is not kept
    compacted = advance(drained, ReactiveCompactRetry("input_too_long", 30_000), failed)
    assert (
        compacted.context.reactive_attempted == {"input_too_long"}
        and compacted.context.learned_limit == 30_000
    )
    answered = TurnOutcome(content=({"type": "text", "text": "done"},), stop_reason="end_turn", complete=True)
    hooked = advance(compacted, StopHookBlocking(("lint: 3 errors",)), answered)
    assert hooked.context.reactive_attempted == {"input_too_long"} and hooked.stop_hook_active
    assert hooked.messages[-2] == {"role": "assistant", "content": [{"type": "text", "text": "done"}]}
    assert "lint: 3 errors" in hooked.messages[-1]["content"][0]["text"]
    tool_turn = TurnOutcome(
        content=({"type": "tool_use", "id": "t1", "name": "read", "input": {}},),
        stop_reason="tool_use",
        complete=True,
    )
    progressed = advance(
        hooked, NextTurn(1), tool_turn, [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]
    )
    assert progressed.context.reactive_attempted == frozenset() and progressed.context.learned_limit == 30_000
    downgraded = advance(start, ThinkingDowngrade("context_overflow", 9_000, None), failed)
    assert downgraded.context == ContextState(
        thinking_downgraded=True, thinking_disabled=True, thinking_budget=None, max_tokens_cap=9_000
    )


def test_stop_hook_answers() -> None:
    assert after_stop_hooks([]) is None
    assert after_stop_hooks([StopHookResult()]) is None
    assert after_stop_hooks([StopHookResult(("a",)), StopHookResult(("b",))]) == StopHookBlocking(("a", "b"))
    assert after_stop_hooks(
        [StopHookResult(("a",)), StopHookResult(prevent_continuation=True, message="no")]
    ) == (StopHookPrevented("no"))
