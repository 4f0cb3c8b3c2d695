"""After every context layer, on random histories, the API's rules still hold (hypothesis).

Histories mix text, signed and redacted thinking, client tool calls with results of every size
(some errors, some with images), server tool calls with their results in the same message, user
follow-ups, and earlier compaction/collapse notes. Each layer runs alone and all of them run in
order (with auto-compaction's summary, or its truncation fallback) under random settings chosen to
make them act: the tool_use/tool_result pairing, the server tool pairing and the three thinking
rules are checked with the independent checkers of ``tests.loop.support`` after each.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from loop.context import autocompact, budget, collapse, microcompact, snip
from loop.context.config import ContextConfig
from loop.context.result import LayerResult
from loop.context.settings import ContextSettings, LayerState
from loop.context.state import Pending
from loop.context.thinking import strip_thinking
from loop.messages import normalize
from tests.loop.support import pairing_violations, server_tool_violations, thinking_violations

TOOLS = ("read", "grep", "edit", "exempt")
IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}


@st.composite
def result_content(draw: st.DrawFn) -> Any:
    size = draw(st.sampled_from([10, 300, 2_500, 9_000, 20_000]))
    text = draw(st.sampled_from(["x", "line of output\n", "é"])) * size
    if draw(st.integers(0, 4)) == 0:
        return [{"type": "text", "text": text}, IMAGE]
    return text


@st.composite
def histories(draw: st.DrawFn) -> list[dict[str, Any]]:
    first: list[dict[str, Any]] = [{"type": "text", "text": draw(st.sampled_from(["fix it", "task " * 500]))}]
    if draw(st.booleans()):
        first.append(IMAGE)
    messages: list[dict[str, Any]] = [{"role": "user", "content": first}]
    turns = draw(st.integers(1, 14))
    counter = 0
    for turn in range(turns):
        content: list[dict[str, Any]] = []
        if draw(st.booleans()):
            content.append({"type": "thinking", "thinking": f"plan {turn}", "signature": f"sig{turn}"})
        if draw(st.integers(0, 5)) == 0:
            content.append({"type": "redacted_thinking", "data": f"opaque{turn}"})
        if draw(st.booleans()):
            content.append({"type": "text", "text": draw(st.sampled_from(["ok", "looking " * 200]))})
        if draw(st.integers(0, 4)) == 0:
            counter += 1
            server_id = f"srvtoolu_{counter}"
            content.append(
                {"type": "server_tool_use", "id": server_id, "name": "web_search", "input": {"q": "x"}}
            )
            content.append(
                {
                    "type": "web_search_tool_result",
                    "tool_use_id": server_id,
                    "content": [{"type": "web_search_result", "url": "https://e.x", "title": "t"}],
                }
            )
        calls = draw(st.integers(0, 3))
        ids = []
        for _ in range(calls):
            counter += 1
            ids.append(f"toolu_{counter}")
            content.append(
                {
                    "type": "tool_use",
                    "id": ids[-1],
                    "name": draw(st.sampled_from(TOOLS)),
                    "input": {"n": counter},
                }
            )
        if not content or content[-1]["type"] in ("thinking", "redacted_thinking"):
            content.append({"type": "text", "text": "done"})
        messages.append({"role": "assistant", "content": content})
        if ids:
            results = []
            for tool_use_id in ids:
                block: dict[str, Any] = {
                    "type": "tool_result",
                    "tool_use_id": tool_use_id,
                    "content": draw(result_content()),
                }
                if draw(st.integers(0, 5)) == 0:
                    block["is_error"] = True
                results.append(block)
            messages.append({"role": "user", "content": results})
        else:
            text = draw(st.sampled_from(["continue", "[Collapsed context: earlier tool work]\n- read -> x"]))
            messages.append({"role": "user", "content": [{"type": "text", "text": text}]})
    return messages


@st.composite
def contexts(draw: st.DrawFn) -> tuple[ContextSettings, LayerState]:
    config = ContextConfig(
        snip_max_turns=draw(st.integers(3, 12)),
        snip_batch_turns=draw(st.integers(0, 3)),
        protected_tail_turns=draw(st.integers(1, 2)),
        protected_tail_max_tokens=draw(st.sampled_from([500, 5_000, 20_000])),
        microcompact_keep_results=draw(st.integers(0, 3)),
        microcompact_min_age_turns=draw(st.integers(0, 3)),
        microcompact_min_free_tokens=draw(st.sampled_from([0, 100, 8_000])),
        tool_results_per_message_chars=draw(st.sampled_from([None, 5_000, 50_000])),
        keep_first_message_tokens=draw(st.sampled_from([0, 4_000])),
    )
    caps = {
        "read": draw(st.sampled_from([None, 1_000, 8_000])),
        "grep": 2_000,
        "edit": 50_000,
        "exempt": None,
    }
    settings_ = ContextSettings(
        config,
        effective_window=draw(st.sampled_from([20_000, 60_000])),
        blocking_buffer_tokens=3_000,
        tool_caps=caps,
        overhead_tokens=200,
        thinking=draw(st.booleans()),
    )
    state = LayerState(
        turn=7,
        tokens=draw(st.sampled_from([1_000, 30_000, 100_000])),
        pending=draw(st.sampled_from([None, Pending.DRAIN, Pending.REACTIVE])),
        learned_limit=draw(st.sampled_from([None, 12_000])),
    )
    return settings_, state


def check(
    before: list[dict[str, Any]], result: tuple[dict[str, Any], ...], thinking: bool, where: str
) -> None:
    after = list(result)
    assert pairing_violations(after) == [], where
    assert server_tool_violations(after) == [], where
    assert thinking_violations(before, after, thinking_enabled=True) == [], where
    assert after and after[0]["role"] == "user" and after[-1]["role"] == "user", where
    if not thinking:
        stripped = list(strip_thinking(result))
        assert thinking_violations(before, stripped, thinking_enabled=False) == [], where
        assert pairing_violations(normalize(stripped)) == [], where


def compacted(
    messages: tuple[dict[str, Any], ...], state: LayerState, settings_: ContextSettings, summary: str | None
) -> LayerResult:
    planned = autocompact.plan(messages, state, settings_, breaker_open=False)
    if isinstance(planned, LayerResult):
        return planned
    assert planned.messages[0]["role"] == "user" and len(planned.messages) == 1
    request_blocks = planned.messages[0]["content"]
    assert all(
        b["type"] == "text" for b in request_blocks
    )  # no tool or thinking blocks: no tools, no thinking
    return autocompact.complete(planned, summary, state, settings_)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(history=histories(), context=contexts(), summary=st.sampled_from(["The agent read files.", None]))
def test_every_layer_keeps_the_pairing_and_the_thinking_rules(
    history: list[dict[str, Any]], context: tuple[ContextSettings, LayerState], summary: str | None
) -> None:
    settings_, state = context
    assert pairing_violations(history) == [] and server_tool_violations(history) == []
    messages = tuple(history)
    for layer in (budget.apply, snip.apply, microcompact.apply, collapse.apply):
        alone = layer(messages, state, settings_)
        check(history, alone.messages, settings_.thinking, f"{layer.__module__} alone")
    chained = messages
    for layer in (budget.apply, snip.apply, microcompact.apply, collapse.apply):
        result = layer(chained, state, settings_)
        check(history, result.messages, settings_.thinking, f"{layer.__module__} chained")
        if result.messages is not chained:
            event(f"{result.layer.value} acted")
        chained = result.messages
        state = state.with_tokens(max(0, state.tokens - result.tokens_freed))
    final = compacted(chained, state, settings_, summary)
    if final.event is not None:
        event(f"{final.layer.value} {final.event.outcome.value}")
    check(history, final.messages, settings_.thinking, "autocompact")
    assert tuple(normalize(final.messages)) == final.messages  # nothing left for the normaliser to fix
