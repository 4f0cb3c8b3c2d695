"""Context windows and size caps the emulators enforce, and the ``agent`` scenario on a compacted
history, driven with the real SDK clients.

* first party, Vertex and Foundry refuse a prompt longer than the model's window with the
  first-party ``prompt is too long: N tokens > M maximum`` (N by the emulator's token rule, the
  same number ``count_tokens`` gives); Bedrock with ``Input is too long.``;
* ``max_body_bytes`` lowers the first-party body cap: ``413 request_too_large``;
* the ``agent`` scenario moves on from the tool that got the latest result, so a client that
  replaced older calls by a summary is not asked for them again.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import anthropic
import pytest

from emulators import EmulatorConfig, ManualClock, RunningEmulator, run_emulator
from emulators.bedrock_config import DEFAULT_API_KEY as BEDROCK_KEY
from emulators.catalog import DEFAULT_CATALOG, ModelCatalog
from emulators.config import DEFAULT_API_KEY, DEFAULT_FOUNDRY_KEY, DEFAULT_VERTEX_TOKEN

WINDOW = 2_000
MODEL = "claude-sonnet-4-5"


def small_window_config(**extra: Any) -> EmulatorConfig:
    catalog = ModelCatalog(tuple(replace(spec, context_window=WINDOW) for spec in DEFAULT_CATALOG))
    return EmulatorConfig(clock=ManualClock(), catalog=catalog, **extra)


def prompt(chars: int) -> list[Any]:
    return [{"role": "user", "content": "x" * chars}]


@pytest.fixture
async def first_party() -> AsyncIterator[tuple[RunningEmulator, anthropic.AsyncAnthropic]]:
    async with (
        run_emulator(small_window_config()) as running,
        anthropic.AsyncAnthropic(api_key=DEFAULT_API_KEY, base_url=running.base_url, max_retries=0) as client,
    ):
        yield running, client


async def test_first_party_refuses_a_prompt_longer_than_the_window(
    first_party: tuple[RunningEmulator, anthropic.AsyncAnthropic],
) -> None:
    _, client = first_party
    fits = prompt(4 * (WINDOW - 20))
    counted = (await client.messages.count_tokens(model=MODEL, messages=fits)).input_tokens
    assert counted <= WINDOW
    await client.messages.create(model=MODEL, max_tokens=16, messages=fits)
    too_long = prompt(4 * (WINDOW + 10))
    counted = (await client.messages.count_tokens(model=MODEL, messages=too_long)).input_tokens
    assert counted > WINDOW  # count_tokens is not held to the window
    with pytest.raises(anthropic.BadRequestError) as caught:
        await client.messages.create(model=MODEL, max_tokens=16, messages=too_long)
    assert caught.value.body == {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": f"prompt is too long: {counted} tokens > {WINDOW} maximum",
        },
        "request_id": caught.value.request_id,
    }
    # streaming is refused the same way, before any event
    with pytest.raises(anthropic.BadRequestError):
        async with client.messages.stream(model=MODEL, max_tokens=16, messages=too_long) as stream:
            await stream.get_final_message()
    # the 1M-context beta lifts the window
    message = await client.beta.messages.create(
        model=MODEL, max_tokens=16, messages=too_long, betas=["context-1m-2025-08-07"]
    )
    assert message.usage.input_tokens == counted


async def test_vertex_and_foundry_answer_in_the_first_party_envelope() -> None:
    config = small_window_config()
    too_long = prompt(4 * (WINDOW + 10))
    async with (
        run_emulator(config, provider="vertex") as vertex_emulator,
        anthropic.AsyncAnthropicVertex(
            region="us-east5",
            project_id="proj",
            access_token=DEFAULT_VERTEX_TOKEN,
            base_url=vertex_emulator.base_url + "/v1",
            max_retries=0,
        ) as vertex,
        run_emulator(config, provider="foundry") as foundry_emulator,
        anthropic.AsyncAnthropicFoundry(
            api_key=DEFAULT_FOUNDRY_KEY, base_url=foundry_emulator.base_url + "/anthropic/", max_retries=0
        ) as foundry,
    ):
        for client, model in ((vertex, "claude-sonnet-4-5@20250929"), (foundry, MODEL)):
            with pytest.raises(anthropic.BadRequestError) as caught:
                await client.messages.create(model=model, max_tokens=16, messages=too_long)
            assert caught.value.type == "invalid_request_error"
            assert caught.value.message.startswith("Error code: 400")
            body = caught.value.body
            assert isinstance(body, dict)
            assert str(body["error"]["message"]).startswith("prompt is too long: ")
            assert str(body["error"]["message"]).endswith(f" tokens > {WINDOW} maximum")


async def test_bedrock_says_input_is_too_long() -> None:
    async with (
        run_emulator(small_window_config(), provider="bedrock") as running,
        anthropic.AsyncAnthropicBedrock(
            api_key=BEDROCK_KEY, aws_region="us-east-1", base_url=running.base_url, max_retries=0
        ) as client,
    ):
        with pytest.raises(anthropic.BadRequestError) as caught:
            await client.messages.create(
                model="us.anthropic.claude-sonnet-4-5-20250929-v1:0",
                max_tokens=16,
                messages=prompt(4 * (WINDOW + 10)),
            )
    assert isinstance(caught.value.body, dict) and caught.value.body["message"] == "Input is too long."


async def test_a_lower_body_cap_is_a_413() -> None:
    async with (
        run_emulator(EmulatorConfig(max_body_bytes=20_000)) as running,
        anthropic.AsyncAnthropic(api_key=DEFAULT_API_KEY, base_url=running.base_url, max_retries=0) as client,
    ):
        await client.messages.create(model=MODEL, max_tokens=16, messages=prompt(10_000))
        with pytest.raises(anthropic.APIStatusError) as caught:
            await client.messages.create(model=MODEL, max_tokens=16, messages=prompt(30_000))
    assert caught.value.status_code == 413
    assert isinstance(caught.value.body, dict)
    assert caught.value.body["error"] == {
        "type": "request_too_large",
        "message": "Request exceeds the maximum allowed number of bytes.",
    }


# --- the agent scenario on a compacted history --------------------------------------------------

TOOLS: list[Any] = [
    {"name": name, "description": "A step.", "input_schema": {"type": "object", "properties": {}}}
    for name in ("step_a", "step_b", "step_c", "step_d")
]
TASK = "[[scenario:agent]] [[tools:step_a,step_b,step_c,step_d]] do the four steps"


def call(name: str, tool_use_id: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": tool_use_id, "name": name, "input": {}}],
    }


def answer(tool_use_id: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_use_id, "content": "ok"}]}


async def next_call(client: anthropic.AsyncAnthropic, messages: list[Any]) -> str:
    message = await client.messages.create(model=MODEL, max_tokens=200, tools=TOOLS, messages=messages)
    uses = [b for b in message.content if b.type == "tool_use"]
    return uses[0].name if uses else "finished"


async def test_the_agent_scenario_moves_on_after_a_compaction() -> None:
    async with (
        run_emulator(EmulatorConfig(clock=ManualClock())) as running,
        anthropic.AsyncAnthropic(api_key=DEFAULT_API_KEY, base_url=running.base_url, max_retries=0) as client,
    ):
        assert await next_call(client, [{"role": "user", "content": TASK}]) == "step_a"
        full = [
            {"role": "user", "content": TASK},
            call("step_a", "t1"),
            answer("t1"),
            call("step_b", "t2"),
            answer("t2"),
        ]
        assert await next_call(client, full) == "step_c"
        # steps a and b replaced by a summary the client wrote: the task and the summary in one
        # user message, then the protected tail (the last call and its result)
        summary = {"type": "text", "text": "[Summary: step_a and step_b were done.]"}
        compacted = [
            {"role": "user", "content": [{"type": "text", "text": TASK}, summary]},
            call("step_b", "t2"),
            answer("t2"),
        ]
        assert await next_call(client, compacted) == "step_c"
        # a digest the client inserted as its own user message after the task: the task's markers
        # still apply (consecutive user messages are one turn)
        digested = [
            {"role": "user", "content": TASK},
            {"role": "user", "content": "[Collapsed context: step_a, step_b, step_c done]"},
            call("step_c", "t3"),
            answer("t3"),
        ]
        assert await next_call(client, digested) == "step_d"
        done = [*digested, call("step_d", "t4"), answer("t4")]
        assert await next_call(client, done) == "finished"


async def test_a_new_prompt_starts_the_list_again() -> None:
    async with (
        run_emulator(EmulatorConfig(clock=ManualClock())) as running,
        anthropic.AsyncAnthropic(api_key=DEFAULT_API_KEY, base_url=running.base_url, max_retries=0) as client,
    ):
        first = [{"role": "user", "content": TASK}]
        for i, name in enumerate(("step_a", "step_b", "step_c", "step_d")):
            first += [call(name, f"t{i}"), answer(f"t{i}")]
        assert await next_call(client, first) == "finished"
        again = [*first, {"role": "assistant", "content": "All done."}, {"role": "user", "content": TASK}]
        assert await next_call(client, again) == "step_a"
        again += [call("step_a", "u1"), answer("u1")]
        assert await next_call(client, again) == "step_b"


async def test_a_summary_request_quoting_agent_markers_is_answered_with_text() -> None:
    async with (
        run_emulator(EmulatorConfig(clock=ManualClock())) as running,
        anthropic.AsyncAnthropic(api_key=DEFAULT_API_KEY, base_url=running.base_url, max_retries=0) as client,
    ):
        transcript = f"<conversation>\n[user]\n{TASK}\n[assistant]\n[called step_a]\n</conversation>"
        message = await client.messages.create(
            model=MODEL,
            max_tokens=300,
            messages=[
                {
                    "role": "user",
                    "content": [{"type": "text", "text": transcript}, {"type": "text", "text": "Summarise."}],
                }
            ],
        )
    assert message.stop_reason == "end_turn" and [b.type for b in message.content] == ["text"]
