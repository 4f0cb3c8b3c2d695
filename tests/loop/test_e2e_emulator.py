"""The loop against the real emulator on loopback, through both production model callers:

* ``sdk``: ``SdkModelCaller`` (the official SDK) → the real gateway → the emulator;
* ``provider``: ``ProviderModelCaller`` (the gateway's provider layer in process, configured by
  ``Settings`` whose ``ANTHROPIC_BASE_URL`` is the emulator).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import loop
from loop.callers import ProviderModelCaller, SdkModelCaller
from loop.deps import ModelCaller
from loop.events import AssistantMessage, StatusEvent, StreamEvent
from loop.tools import PermissionMode, PermissionPolicy
from loop.tools.builtin import builtin_tools
from loop.transitions import (
    Completed,
    MaxOutputTokensEscalate,
    MaxOutputTokensRecovery,
    MaxTurns,
    ModelError,
    NextTurn,
    PauseTurnResume,
    PromptTooLong,
    Refusal,
)
from tests.loop.support import pairing_violations, run_to_end
from tests.support.loop_stack import GATEWAY_KEY, MAX_RETRIES, LoopStack


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / "README.md").write_text("# project\n")
    (tmp_path / "src").mkdir()
    return tmp_path


def params(
    caller: ModelCaller, prompt: str, workspace: Path | None = None, **config: Any
) -> loop.QueryParams:
    return loop.QueryParams(
        messages=prompt,
        system="You are a test agent.",
        tools=builtin_tools(workspace) if workspace is not None else [],
        config=loop.LoopConfig(**config),
        deps=loop.LoopDeps(call_model=caller),
        permissions=PermissionPolicy(mode=PermissionMode.ACCEPT_EDITS),
    )


async def test_an_agent_calls_tools_in_order_and_completes(
    caller: ModelCaller, stack: LoopStack, workspace: Path
) -> None:
    run = loop.query(
        params(caller, "[[scenario:agent]] [[tools:list_directory,search_files]] explore", workspace)
    )
    events = await run_to_end(run)
    assert run.terminal == Completed("end_turn")
    assert run.state.transitions == (NextTurn(1), NextTurn(1))
    bodies = stack.message_bodies()
    assert len(bodies) == 3
    for body in bodies:
        assert pairing_violations(body["messages"]) == []
    listing = bodies[1]["messages"][-1]["content"][0]
    assert listing["type"] == "tool_result" and listing["content"] == "README.md\nsrc/"
    final = [e for e in events if isinstance(e, AssistantMessage)][-1]
    assert final.message["content"][0]["text"].startswith(
        "All tools finished (list_directory, search_files)."
    )
    assert final.usage.input_tokens > 0 and final.usage.output_tokens > 0


@pytest.mark.parametrize(
    ("prompt", "expected"),
    [
        ("[[scenario:stream_error]] hi", ModelError("overloaded_error", "Overloaded", None)),
        ("[[scenario:error:529]] hi", ModelError("overloaded_error", "Overloaded", 529)),
        (
            "[[scenario:error:429]] hi",
            ModelError(
                "rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit", 429
            ),
        ),
    ],
)
async def test_api_errors(caller: ModelCaller, stack: LoopStack, prompt: str, expected: ModelError) -> None:
    run = loop.query(params(caller, prompt))
    await run.wait()
    assert isinstance(run.terminal, ModelError)
    assert (run.terminal.error_type, run.terminal.status) == (expected.error_type, expected.status)
    if expected.status == 529:
        assert run.terminal.message == expected.message


async def test_retries_are_bounded_and_the_in_process_caller_reports_them(
    caller: ModelCaller, stack: LoopStack
) -> None:
    run = loop.query(params(caller, "[[scenario:error:529]] hi"))
    events = await run_to_end(run)
    assert run.terminal == ModelError("overloaded_error", "Overloaded", 529)
    assert len(stack.message_bodies()) == MAX_RETRIES + 1
    statuses = [e for e in events if isinstance(e, StatusEvent)]
    if isinstance(caller, ProviderModelCaller):  # through the gateway server, retries are its own
        assert [(s.kind, s.attempt, s.status, s.error_type) for s in statuses] == [
            ("retry", n, 529, "overloaded_error") for n in range(1, MAX_RETRIES + 1)
        ]
        assert all(s.delay_s == 0.001 for s in statuses)
    else:
        assert statuses == []


async def test_a_413_is_prompt_too_long(caller: ModelCaller, stack: LoopStack) -> None:
    run = loop.query(params(caller, "[[scenario:error:413]] hi"))
    await run.wait()
    assert isinstance(run.terminal, PromptTooLong) and "request_too_large" in run.terminal.detail


async def test_refusal(caller: ModelCaller, stack: LoopStack) -> None:
    run = loop.query(params(caller, "[[scenario:refusal]] hi"))
    await run.wait()
    assert run.terminal == Refusal({"type": "refusal", "category": None, "explanation": None})


async def test_context_window_exceeded(caller: ModelCaller, stack: LoopStack) -> None:
    run = loop.query(params(caller, "[[scenario:model_context_window_exceeded]] hi"))
    await run.wait()
    assert isinstance(run.terminal, PromptTooLong)


async def test_pause_turn_resumes_until_the_safety_net(caller: ModelCaller, stack: LoopStack) -> None:
    run = loop.query(params(caller, "[[scenario:pause_turn]] keep going", max_turns=3))
    await run.wait()
    assert run.terminal == MaxTurns(3)
    assert run.state.transitions == (PauseTurnResume(), PauseTurnResume(), PauseTurnResume())
    bodies = stack.message_bodies()
    assert [m["role"] for m in bodies[2]["messages"]] == ["user", "assistant", "assistant"]


async def test_max_tokens_escalates_then_continues(caller: ModelCaller, stack: LoopStack) -> None:
    run = loop.query(params(caller, "[[scenario:max_tokens]] write a lot"))
    await run.wait()
    # req 1 hits 8,000 → clean retry at 64,000 (still cut) → "continue" turn: the emulator's
    # scenario marker is in the original prompt, not in the continue message, so it answers.
    assert run.state.transitions == (MaxOutputTokensEscalate(64_000), MaxOutputTokensRecovery(1))
    assert run.terminal == Completed("end_turn")
    bodies = stack.message_bodies()
    assert [b["max_tokens"] for b in bodies] == [8_000, 64_000, 64_000]
    assert bodies[1]["messages"] == bodies[0]["messages"]
    assert bodies[2]["messages"][-2]["role"] == "assistant"
    assert pairing_violations(run.messages) == []


async def test_thinking_signatures_survive_the_round_trip(
    caller: ModelCaller, stack: LoopStack, workspace: Path
) -> None:
    run = loop.query(
        params(
            caller,
            "[[scenario:tool_use]] [[tool:list_directory]] look",
            workspace,
            thinking_budget_tokens=2048,
        )
    )
    await run.wait()
    assert run.terminal == Completed("end_turn")
    first_reply = stack.message_bodies()[1]["messages"][1]["content"]
    assert first_reply[0]["type"] == "thinking" and first_reply[0]["signature"]
    assert run.messages[1]["content"][0] == {k: v for k, v in first_reply[0].items() if k != "cache_control"}


async def test_both_callers_yield_the_same_event_dicts(stack: LoopStack, workspace: Path) -> None:
    streams: list[list[dict[str, Any]]] = []
    async with (
        SdkModelCaller(stack.gateway_url, GATEWAY_KEY, max_retries=0) as sdk,
        ProviderModelCaller.from_environ(stack.upstream_environ()) as provider,
    ):
        for caller in (sdk, provider):
            run = loop.query(params(caller, "[[scenario:tool_use]] [[tool:list_directory]] look", workspace))
            events = await run_to_end(run)
            stream = [e.event for e in events if isinstance(e, StreamEvent)]
            for event in stream:
                if event["type"] == "message_start":
                    event["message"].pop("id")
            streams.append(stream)
    assert len(streams[0]) > 10
    assert streams[0] == streams[1]


async def test_the_provider_caller_reports_an_unreachable_upstream() -> None:
    environ = {
        "ANTHROPIC_API_KEY": "k",
        "ANTHROPIC_BASE_URL": "http://127.0.0.1:9",
        "GATEWAY_MAX_RETRIES": "1",
        "GATEWAY_MAX_RETRY_DELAY_S": "0.01",
    }
    async with ProviderModelCaller.from_environ(environ) as caller:
        run = loop.query(params(caller, "hi"))
        events = await run_to_end(run)
    assert isinstance(run.terminal, ModelError)
    assert run.terminal.status == 502 and "unreachable" in run.terminal.message
    (status,) = [e for e in events if isinstance(e, StatusEvent)]
    assert (status.kind, status.attempt, status.error_type, status.status) == (
        "retry",
        1,
        "connection_error",
        None,
    )
