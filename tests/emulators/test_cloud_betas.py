"""The emulators refuse what the clouds refuse: Bedrock's and Vertex's own beta lists and body
rules (``emulators.cloud_betas``), driven with the SDK's own Bedrock and Vertex clients; and
the first-party emulator takes Claude Code 2.1.332's first-party betas and fields."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anthropic
import pytest

from emulators import EmulatorConfig, ManualClock, RunningEmulator, run_emulator
from emulators.bedrock_config import DEFAULT_API_KEY as BEDROCK_KEY
from emulators.config import DEFAULT_API_KEY, DEFAULT_VERTEX_TOKEN
from tests.support.claude_code_betas import CC332_FIRST_PARTY, CC332_VERTEX_HEADER

BEDROCK_MODEL = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
VERTEX_MODEL = "claude-sonnet-4-5@20250929"
FIRST_PARTY_MODEL = "claude-sonnet-4-5"
# the role:"system" message as 2.1.332 sends it first-party, with its per-turn output_config
SYSTEM_WITH_OUTPUT_CONFIG: Any = {
    "role": "system",
    "content": "Environment: linux",
    "output_config": {"effort": "medium"},
}
CLEAR_THINKING = {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}
CLEAR_TOOL_USES = {"edits": [{"type": "clear_tool_uses_20250919"}]}


def user(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


@pytest.fixture
def config() -> EmulatorConfig:
    return EmulatorConfig(clock=ManualClock())


@pytest.fixture
async def bedrock(config: EmulatorConfig) -> AsyncIterator[anthropic.AsyncAnthropicBedrock]:
    async with (
        run_emulator(config, provider="bedrock") as running,
        anthropic.AsyncAnthropicBedrock(
            api_key=BEDROCK_KEY, aws_region="us-east-1", base_url=running.base_url, max_retries=0
        ) as client,
    ):
        yield client


@pytest.fixture
async def vertex(config: EmulatorConfig) -> AsyncIterator[anthropic.AsyncAnthropicVertex]:
    async with (
        run_emulator(config, provider="vertex") as running,
        anthropic.AsyncAnthropicVertex(
            region="us-east5",
            project_id="proj",
            access_token=DEFAULT_VERTEX_TOKEN,
            base_url=running.base_url + "/v1",
            max_retries=0,
        ) as client,
    ):
        yield client


@pytest.fixture
async def first_party(
    config: EmulatorConfig,
) -> AsyncIterator[tuple[RunningEmulator, anthropic.AsyncAnthropic]]:
    async with (
        run_emulator(config) as running,
        anthropic.AsyncAnthropic(api_key=DEFAULT_API_KEY, base_url=running.base_url, max_retries=0) as client,
    ):
        yield running, client


async def bedrock_call(
    client: anthropic.AsyncAnthropicBedrock,
    *,
    header: list[str] = (),  # type: ignore[assignment]
    body: list[str] | None = None,
    messages: list[Any] | None = None,
    **extra: Any,
) -> anthropic.types.Message:
    """One InvokeModel call with ``header`` betas only in the ``anthropic-beta`` header and
    ``body`` betas only in ``anthropic_beta`` (the SDK copies a per-request header into a body
    without that key, so with a header the body list is always set explicitly)."""
    extra_body: dict[str, Any] = dict(extra)
    if body is not None or header:
        extra_body["anthropic_beta"] = body or []
    return await client.messages.create(
        model=BEDROCK_MODEL,
        max_tokens=16,
        messages=messages or user("hi"),
        extra_headers={"anthropic-beta": ",".join(header)} if header else None,
        extra_body=extra_body,
    )


async def bedrock_400(client: anthropic.AsyncAnthropicBedrock, **kwargs: Any) -> str:
    with pytest.raises(anthropic.BadRequestError) as caught:
        await bedrock_call(client, **kwargs)
    body = caught.value.body
    assert isinstance(body, dict)
    return str(body["message"])


# --- Bedrock ----------------------------------------------------------------------------------


async def test_bedrock_takes_claude_codes_own_bedrock_mode_betas(
    bedrock: anthropic.AsyncAnthropicBedrock,
) -> None:
    # 2.1.332 (providers.md s7) and 2.1.197 (fixtures 047/048), as Claude Code splits them
    cc332 = await bedrock_call(
        bedrock,
        header=["claude-code-20250219", "thinking-token-count-2026-05-13", "effort-2025-11-24"],
        body=[
            "interleaved-thinking-2025-05-14",
            "tool-search-tool-2025-10-19",
            "thinking-token-count-2026-05-13",
        ],
        messages=[*user("hi"), {"role": "system", "content": "Environment: linux"}],
    )
    cc197 = await bedrock_call(
        bedrock,
        header=["claude-code-20250219"],
        body=["interleaved-thinking-2025-05-14", "tool-search-tool-2025-10-19"],
    )
    assert cc332.stop_reason == cc197.stop_reason == "end_turn"


@pytest.mark.parametrize(
    ("header", "body"),
    [
        ([], ["per-turn-control-2026-07-01"]),  # first-party only (providers.md s7)
        ([], ["mid-conversation-system-2026-04-07"]),
        ([], ["advanced-tool-use-2025-11-20"]),  # Bedrock's name is tool-search-tool-2025-10-19
        ([], ["extended-cache-ttl-2025-04-11"]),  # anthropics/claude-code#56595
        ([], ["claude-code-20250219"]),  # Claude Code sends it in the header only
        ([], ["request-tags-2026-08-21"]),
        (["per-turn-control-2026-07-01"], []),
        (["context-management-2025-06-27", "mid-conversation-tool-changes-2026-07-01"], []),
        (["prompt-caching-scope-2026-01-05"], ["interleaved-thinking-2025-05-14"]),
    ],
)
async def test_bedrock_refuses_other_betas(
    bedrock: anthropic.AsyncAnthropicBedrock, header: list[str], body: list[str]
) -> None:
    assert await bedrock_400(bedrock, header=header, body=body) == "invalid beta flag"


async def test_bedrock_body_betas_are_also_taken_in_the_header(
    bedrock: anthropic.AsyncAnthropicBedrock,
) -> None:
    # the SDK's own way: betas= sends the header and copies it into the body (providers.md s2)
    message = await bedrock.beta.messages.create(
        model=BEDROCK_MODEL,
        max_tokens=16,
        messages=user("hi"),
        betas=["interleaved-thinking-2025-05-14", "context-1m-2025-08-07", "computer-use-2025-01-24"],
    )
    assert message.stop_reason == "end_turn"


async def test_bedrock_context_management(bedrock: anthropic.AsyncAnthropicBedrock) -> None:
    beta = ["context-management-2025-06-27"]
    refusal = "context_management: Extra inputs are not permitted"
    assert await bedrock_400(bedrock, context_management=CLEAR_THINKING) == refusal
    assert await bedrock_400(bedrock, body=beta, context_management=CLEAR_THINKING) == refusal
    assert await bedrock_400(bedrock, header=beta, context_management=CLEAR_TOOL_USES) == refusal
    message = await bedrock_call(bedrock, body=beta, context_management=CLEAR_TOOL_USES)
    assert message.stop_reason == "end_turn"


async def test_bedrock_refuses_first_party_only_fields(bedrock: anthropic.AsyncAnthropicBedrock) -> None:
    assert await bedrock_400(bedrock, tags={"team": "a"}) == "tags: Extra inputs are not permitted"
    message = await bedrock_400(bedrock, messages=[*user("hi"), SYSTEM_WITH_OUTPUT_CONFIG])
    assert message == "messages.1.output_config: Extra inputs are not permitted"
    scoped = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "a", "cache_control": {"type": "ephemeral", "scope": "global"}}
            ],
        }
    ]
    assert (await bedrock_400(bedrock, messages=scoped)).endswith("scope: Extra inputs are not permitted")


async def test_bedrock_beta_checking_can_be_switched_off() -> None:
    async with run_emulator(
        EmulatorConfig(clock=ManualClock(), check_betas=False), provider="bedrock"
    ) as running:
        client = anthropic.AsyncAnthropicBedrock(
            api_key=BEDROCK_KEY, aws_region="us-east-1", base_url=running.base_url, max_retries=0
        )
        message = await bedrock_call(client, header=["made-up-2099-01-01"], body=["made-up-2099-01-01"])
        assert message.stop_reason == "end_turn"
        await client.close()


# --- Vertex -----------------------------------------------------------------------------------


async def vertex_400(client: anthropic.AsyncAnthropicVertex, betas: list[str], **extra: Any) -> str:
    with pytest.raises(anthropic.BadRequestError) as caught:
        await client.beta.messages.create(
            model=VERTEX_MODEL, max_tokens=16, messages=user("hi"), betas=betas, extra_body=extra or None
        )
    body = caught.value.body
    assert isinstance(body, dict)
    return str(body["error"]["message"])


async def test_vertex_takes_claude_codes_own_vertex_mode_betas(
    vertex: anthropic.AsyncAnthropicVertex,
) -> None:
    cc332 = list(CC332_VERTEX_HEADER)
    message = await vertex.beta.messages.create(
        model=VERTEX_MODEL,
        max_tokens=16,
        messages=[*user("hi"), {"role": "system", "content": "Environment: linux"}],
        betas=cc332,
    )
    assert message.stop_reason == "end_turn"


@pytest.mark.parametrize(
    "beta",
    [
        "per-turn-control-2026-07-01",
        "mid-conversation-tool-changes-2026-07-01",
        "mid-conversation-system-2026-04-07",
        "advanced-tool-use-2025-11-20",
        "context-management-2025-06-27",
        "prompt-caching-scope-2026-01-05",
        "request-tags-2026-08-21",
    ],
)
async def test_vertex_refuses_other_betas(vertex: anthropic.AsyncAnthropicVertex, beta: str) -> None:
    message = await vertex_400(vertex, ["claude-code-20250219", beta])
    assert message == f"Unsupported beta header: {beta}"


async def test_vertex_refuses_first_party_only_fields(vertex: anthropic.AsyncAnthropicVertex) -> None:
    message = await vertex_400(vertex, ["claude-code-20250219"], context_management=CLEAR_THINKING)
    assert message == "context_management: Extra inputs are not permitted"
    assert await vertex_400(vertex, [], tags={"a": "b"}) == "tags: Extra inputs are not permitted"
    with pytest.raises(anthropic.BadRequestError) as caught:
        await vertex.messages.create(
            model=VERTEX_MODEL, max_tokens=16, messages=[*user("hi"), SYSTEM_WITH_OUTPUT_CONFIG]
        )
    assert isinstance(caught.value.body, dict)
    assert caught.value.body["error"]["message"] == "messages.1.output_config: Extra inputs are not permitted"


# --- first party ------------------------------------------------------------------------------


async def test_first_party_takes_claude_code_2_1_332(
    first_party: tuple[RunningEmulator, anthropic.AsyncAnthropic],
) -> None:
    emu, client = first_party
    message = await client.beta.messages.create(
        model=FIRST_PARTY_MODEL,
        max_tokens=16,
        messages=[*user("hi"), SYSTEM_WITH_OUTPUT_CONFIG],
        betas=list(CC332_FIRST_PARTY),
        extra_body={"context_management": CLEAR_THINKING},
    )
    assert message.stop_reason == "end_turn"
    assert emu.requests[-1].header("anthropic-beta") == ",".join(CC332_FIRST_PARTY)


async def test_first_party_message_output_config_needs_per_turn_control(
    first_party: tuple[RunningEmulator, anthropic.AsyncAnthropic],
) -> None:
    _, client = first_party
    with pytest.raises(anthropic.BadRequestError) as caught:
        await client.beta.messages.create(
            model=FIRST_PARTY_MODEL,
            max_tokens=16,
            messages=[*user("hi"), SYSTEM_WITH_OUTPUT_CONFIG],
            betas=["claude-code-20250219"],
        )
    assert isinstance(caught.value.body, dict)
    assert caught.value.body["error"]["message"] == "messages.1.output_config: Extra inputs are not permitted"
