"""The Foundry emulator as the SDK's own ``AnthropicFoundry`` client and azure-identity see it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import orjson
import pytest
from azure.core.exceptions import ClientAuthenticationError
from azure.identity import ClientSecretCredential

from emulators import EmulatorConfig, ManualClock, RunningEmulator, emulator_in_thread, run_emulator
from tests.providers.foundry_harness import (
    ENTRA_CLIENT_ID,
    ENTRA_CLIENT_SECRET,
    ENTRA_TENANT,
    ENTRA_TOKEN,
    FOUNDRY_KEY,
    ca_bundle,
    error_of,
    follow_up,
    foundry_upstream,
)

MODEL = "claude-sonnet-4-6"
USER: Any = [{"role": "user", "content": "Hello Foundry"}]
TOOL: Any = {
    "name": "lookup",
    "description": "Look something up",
    "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
}


def _config(**overrides: Any) -> EmulatorConfig:
    options: dict[str, Any] = {
        "foundry_api_keys": frozenset({FOUNDRY_KEY}),
        "foundry_entra_tokens": frozenset({ENTRA_TOKEN}),
        "retry_after_ms": 1,
    }
    options.update(overrides)
    return EmulatorConfig(**options)


_OPEN_CLIENTS: list[anthropic.AsyncAnthropicFoundry] = []


@pytest.fixture(autouse=True)
async def _close_clients() -> AsyncIterator[None]:
    yield
    while _OPEN_CLIENTS:
        await _OPEN_CLIENTS.pop().close()


@pytest.fixture
async def emu() -> AsyncIterator[RunningEmulator]:
    async with run_emulator(_config(clock=ManualClock()), provider="foundry") as running:
        yield running


def _client(emu: RunningEmulator, *, entra: bool = False, **kwargs: Any) -> anthropic.AsyncAnthropicFoundry:
    options: dict[str, Any] = {"base_url": emu.base_url + "/anthropic/", "max_retries": 0}
    if entra:
        options["azure_ad_token_provider"] = lambda: ENTRA_TOKEN
    else:
        options["api_key"] = FOUNDRY_KEY
    options.update(kwargs)
    client = anthropic.AsyncAnthropicFoundry(**options)
    _OPEN_CLIENTS.append(client)
    return client


def test_sync_client_with_key_and_with_entra_token() -> None:
    with emulator_in_thread(_config(), provider="foundry") as emu:
        keyed = anthropic.AnthropicFoundry(
            api_key=FOUNDRY_KEY, base_url=emu.base_url + "/anthropic/", max_retries=0
        )
        entra = anthropic.AnthropicFoundry(
            azure_ad_token_provider=lambda: ENTRA_TOKEN, base_url=emu.base_url + "/anthropic/", max_retries=0
        )
        for client in (keyed, entra):
            message = client.messages.create(model=MODEL, max_tokens=32, messages=USER)
            assert message.content[0].type == "text" and message.content[0].text == "Echo: Hello Foundry"
        first, second = emu.requests
    assert first.path == "/anthropic/v1/messages"
    assert first.header("x-api-key") == FOUNDRY_KEY and first.header("api-key") == FOUNDRY_KEY
    assert second.header("authorization") == f"Bearer {ENTRA_TOKEN}" and second.header("x-api-key") is None


@pytest.mark.parametrize("entra", [False, True])
async def test_create_stream_count(emu: RunningEmulator, entra: bool) -> None:
    client = _client(emu, entra=entra)
    message = await client.messages.create(model=MODEL, max_tokens=32, messages=USER)
    assert message.model == MODEL and message.usage.input_tokens > 0
    async with client.messages.stream(model=MODEL, max_tokens=32, messages=USER) as stream:
        final = await stream.get_final_message()
    assert final.content[0].type == "text" and final.content[0].text == "Echo: Hello Foundry"
    count = await client.messages.count_tokens(model=MODEL, messages=USER)
    assert count.input_tokens == message.usage.input_tokens
    assert [r.path for r in emu.requests][-1] == "/anthropic/v1/messages/count_tokens"
    assert all(r.header("apim-request-id") is None for r in emu.requests)  # a response header only


async def test_tool_use_and_thinking(emu: RunningEmulator) -> None:
    client = _client(emu)
    first = await client.messages.create(
        model=MODEL,
        max_tokens=4096,
        thinking={"type": "enabled", "budget_tokens": 1024},
        tools=[TOOL],
        messages=USER,
        extra_headers={"x-emulator-scenario": "tool_use"},
    )
    assert first.content[0].type == "thinking" and first.stop_reason == "tool_use"
    call = next(block for block in first.content if block.type == "tool_use")
    second = await client.messages.create(
        model=MODEL,
        max_tokens=4096,
        thinking={"type": "enabled", "budget_tokens": 1024},
        tools=[TOOL],
        messages=follow_up(USER, first, call.id, "42"),
    )
    assert second.stop_reason == "end_turn"


@pytest.mark.parametrize(
    ("status", "exception", "code"),
    [
        (401, anthropic.AuthenticationError, "401"),
        (403, anthropic.PermissionDeniedError, "PermissionDenied"),
        (429, anthropic.RateLimitError, "429"),
        (503, anthropic.ServiceUnavailableError, "ServiceUnavailable"),
    ],
)
async def test_platform_errors_are_azure_shaped(
    emu: RunningEmulator, status: int, exception: type[anthropic.APIStatusError], code: str
) -> None:
    with pytest.raises(exception) as info:
        await _client(emu).messages.create(
            model=MODEL, max_tokens=8, messages=USER, extra_headers={"x-emulator-scenario": f"error:{status}"}
        )
    assert info.value.status_code == status and info.value.type is None
    assert error_of(info.value)["code"] == code
    assert info.value.response.headers["apim-request-id"]
    if status == 429:
        assert info.value.response.headers["retry-after"] == "1"


@pytest.mark.parametrize(
    ("status", "exception", "error_type"),
    [
        (400, anthropic.BadRequestError, "invalid_request_error"),
        (529, anthropic.OverloadedError, "overloaded_error"),
    ],
)
async def test_model_errors_are_anthropic_shaped(
    emu: RunningEmulator, status: int, exception: type[anthropic.APIStatusError], error_type: str
) -> None:
    with pytest.raises(exception) as info:
        await _client(emu).messages.create(
            model=MODEL, max_tokens=8, messages=USER, extra_headers={"x-emulator-scenario": f"error:{status}"}
        )
    assert info.value.type == error_type


async def test_credentials_and_deployments(emu: RunningEmulator) -> None:
    with pytest.raises(anthropic.AuthenticationError) as key:
        await _client(emu, api_key="wrong").messages.create(model=MODEL, max_tokens=8, messages=USER)
    assert "invalid subscription key" in error_of(key.value)["message"]
    with pytest.raises(anthropic.NotFoundError) as deployment:
        await _client(emu).messages.create(model="my-missing-deployment", max_tokens=8, messages=USER)
    assert error_of(deployment.value)["code"] == "DeploymentNotFound"


async def _post(url: str, headers: dict[str, str], body: Any) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=orjson.dumps(body), headers=headers) as r,
    ):
        return r.status, orjson.loads(await r.read())


async def test_api_key_header_alone_and_required_version(emu: RunningEmulator) -> None:
    body = {"model": MODEL, "max_tokens": 8, "messages": USER}
    url = emu.base_url + "/anthropic/v1/messages"
    status, answer = await _post(url, {"api-key": FOUNDRY_KEY}, body)
    assert status == 400 and answer["error"]["message"] == "anthropic-version: header is required"
    status, answer = await _post(url, {"api-key": FOUNDRY_KEY, "anthropic-version": "2023-06-01"}, body)
    assert status == 200 and answer["type"] == "message"


async def test_unknown_route_and_unsupported_count_tokens() -> None:
    async with run_emulator(_config(foundry_count_tokens=False), provider="foundry") as emu:
        status, answer = await _post(
            emu.base_url + "/openai/v1/chat/completions", {"api-key": FOUNDRY_KEY}, {}
        )
        assert (status, answer) == (404, {"error": {"code": "404", "message": "Resource not found"}})
        with pytest.raises(anthropic.BadRequestError) as info:
            await _client(emu).messages.count_tokens(model=MODEL, messages=USER)
    assert error_of(info.value)["code"] == "api_not_supported"


async def test_entra_token_endpoint_with_real_azure_identity(tmp_path: Path) -> None:
    clock = ManualClock()
    async with foundry_upstream(tmp_path, tls=True, clock=clock) as (env, emu):
        credential = ClientSecretCredential(
            ENTRA_TENANT,
            ENTRA_CLIENT_ID,
            ENTRA_CLIENT_SECRET,
            authority=emu.base_url,
            disable_instance_discovery=True,
            connection_verify=ca_bundle(env),
        )
        loop = asyncio.get_running_loop()
        access = await loop.run_in_executor(None, credential.get_token, "https://ai.azure.com/.default")
        assert access.token.startswith("eyJ0eXAi.emu-") and access.expires_on > 0
        wrong = ClientSecretCredential(
            ENTRA_TENANT,
            ENTRA_CLIENT_ID,
            "not-the-secret",
            authority=emu.base_url,
            disable_instance_discovery=True,
            connection_verify=ca_bundle(env),
        )
        with pytest.raises(ClientAuthenticationError, match="AADSTS7000215"):
            await loop.run_in_executor(None, wrong.get_token, "https://ai.azure.com/.default")
        headers = {"authorization": f"Bearer {access.token}", "anthropic-version": "2023-06-01"}
        body = {"model": MODEL, "max_tokens": 8, "messages": USER}
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=False)) as session:
            async with session.post(
                emu.base_url + "/anthropic/v1/messages", json=body, headers=headers
            ) as ok:
                assert ok.status == 200
            clock.advance(3601)
            async with session.post(
                emu.base_url + "/anthropic/v1/messages", json=body, headers=headers
            ) as expired:
                assert expired.status == 401 and (await expired.json())["error"]["code"] == "401"
    paths = [r.path for r in emu.requests]
    assert paths[:2] == [
        f"/{ENTRA_TENANT}/v2.0/.well-known/openid-configuration",
        f"/{ENTRA_TENANT}/oauth2/v2.0/token",
    ]
