"""First-party clients through the gateway to Microsoft Foundry: API key, Entra ID, errors, cache."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anthropic
import azure.identity
import orjson
import pytest
from azure.core.exceptions import ClientAuthenticationError
from azure.identity import ClientSecretCredential, CredentialUnavailableError

from emulators import ManualClock, RunningEmulator
from emulators.access_tokens import get_tokens
from gateway.config import ConfigError
from gateway.providers import foundry as foundry_module
from gateway.providers.foundry import FoundryProvider
from gateway.providers.foundry_auth import credential_token_source
from tests.providers.foundry_harness import (
    ENTRA_CLIENT_ID,
    ENTRA_CLIENT_SECRET,
    ENTRA_TENANT,
    ENTRA_TOKEN,
    FOUNDRY_KEY,
    GATEWAY_KEY,
    ca_bundle,
    error_of,
    follow_up,
    foundry_gateway,
    foundry_upstream,
    gateway_settings,
)

MODEL = "claude-sonnet-4-6"
USER: Any = [{"role": "user", "content": "Hello via gateway"}]


def _client(url: str) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(api_key=GATEWAY_KEY, base_url=url, max_retries=0)


def _no_key(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k != "ANTHROPIC_FOUNDRY_API_KEY"}


class Stack:
    def __init__(self, url: str, emulator: RunningEmulator) -> None:
        self.client = _client(url)
        self.emulator = emulator


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    async with foundry_upstream(tmp_path) as (env, emulator), foundry_gateway(env) as url:
        stack = Stack(url, emulator)
        async with stack.client:
            yield stack


async def test_create_forwards_the_body_unchanged_with_both_key_headers(stack: Stack) -> None:
    response = await stack.client.messages.with_raw_response.create(
        model=MODEL,
        max_tokens=32,
        messages=USER,
        extra_headers={"anthropic-beta": "interleaved-thinking-2025-05-14, context-1m-2025-08-07"},
    )
    message = await response.parse()
    assert message.content[0].type == "text" and message.content[0].text == "Echo: Hello via gateway"
    (sent,) = stack.emulator.requests
    assert sent.path == "/anthropic/v1/messages"
    assert sent.header("x-api-key") == FOUNDRY_KEY and sent.header("api-key") == FOUNDRY_KEY
    assert sent.header("authorization") is None and sent.header("x-client-request-id") is None
    assert sent.header("anthropic-version") == anthropic._constants.ANTHROPIC_API_VERSION
    assert sent.header("anthropic-beta") == "interleaved-thinking-2025-05-14, context-1m-2025-08-07"
    assert sent.body == response.http_request.content
    assert response.headers["apim-request-id"]


async def test_stream_count_tokens_and_default_version(stack: Stack) -> None:
    async with stack.client.messages.stream(model=MODEL, max_tokens=32, messages=USER) as stream:
        message = await stream.get_final_message()
    assert message.content[0].type == "text" and message.content[0].text == "Echo: Hello via gateway"
    count = await stack.client.messages.count_tokens(model=MODEL, messages=USER)
    assert count.input_tokens == message.usage.input_tokens
    assert [r.path for r in stack.emulator.requests] == [
        "/anthropic/v1/messages",
        "/anthropic/v1/messages/count_tokens",
    ]
    await stack.client.post(
        "/v1/messages",
        cast_to=object,
        body={"model": MODEL, "max_tokens": 8, "messages": USER},
        options={"headers": {"anthropic-version": anthropic.Omit()}},
    )
    assert stack.emulator.requests[-1].header("anthropic-version") == "2023-06-01"


async def test_tool_use_thinking_and_cache(stack: Stack) -> None:
    tool: Any = {"name": "calc", "description": "c", "input_schema": {"type": "object", "properties": {}}}
    system: Any = [{"type": "text", "text": "rules " * 3000, "cache_control": {"type": "ephemeral"}}]
    first = await stack.client.messages.create(
        model=MODEL,
        max_tokens=4096,
        system=system,
        thinking={"type": "enabled", "budget_tokens": 1024},
        tools=[tool],
        messages=USER,
        extra_headers={"x-emulator-scenario": "tool_use"},
    )
    call = next(block for block in first.content if block.type == "tool_use")
    assert first.content[0].type == "thinking" and first.stop_reason == "tool_use"
    second = await stack.client.messages.create(
        model=MODEL,
        max_tokens=4096,
        system=system,
        thinking={"type": "enabled", "budget_tokens": 1024},
        tools=[tool],
        messages=follow_up(USER, first, call.id, "4"),
    )
    assert second.stop_reason == "end_turn"
    assert first.usage.cache_creation_input_tokens
    assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens


@pytest.mark.parametrize(
    ("scenario", "status", "exception", "error_type"),
    [
        ("error:401", 401, anthropic.AuthenticationError, "authentication_error"),
        ("error:403", 403, anthropic.PermissionDeniedError, "permission_error"),
        ("error:429", 429, anthropic.RateLimitError, "rate_limit_error"),
        ("error:503", 503, anthropic.ServiceUnavailableError, "api_error"),
        ("error:529", 529, anthropic.OverloadedError, "overloaded_error"),
        ("error:500", 500, anthropic.InternalServerError, "api_error"),
    ],
)
async def test_errors_are_mapped_and_redacted(
    stack: Stack, scenario: str, status: int, exception: type[anthropic.APIStatusError], error_type: str
) -> None:
    with pytest.raises(exception) as info:
        await stack.client.messages.create(
            model=MODEL, max_tokens=8, messages=USER, extra_headers={"x-emulator-scenario": scenario}
        )
    error = info.value
    assert error.status_code == status and error.type == error_type
    assert "subscription" not in error.message and "Principal" not in error.message
    # retryable errors carry the gateway's advice (gateway.retry_budget): this SDK client may retry
    advice = "false" if status == 401 else "true" if status == 429 or status >= 500 else None
    assert error.response.headers.get("x-should-retry") == advice
    if status == 429:
        assert error.response.headers["retry-after"] == "1"


async def test_anthropic_400_and_unknown_deployment(stack: Stack) -> None:
    with pytest.raises(anthropic.BadRequestError) as bad:
        await stack.client.messages.create(model=MODEL, max_tokens=8, messages=USER, extra_body={"top_k": -1})
    assert error_of(bad.value)["message"] == "top_k: Input should be a non-negative integer"
    with pytest.raises(anthropic.NotFoundError) as missing:
        await stack.client.messages.create(model="team-deployment", max_tokens=8, messages=USER)
    assert missing.value.type == "not_found_error"
    # the client's own deployment name, never the upstream's wording about the resource
    assert error_of(missing.value)["message"] == "model: team-deployment"


async def test_count_tokens_unsupported_is_501_not_supported(tmp_path: Path) -> None:
    async with (
        foundry_upstream(tmp_path, foundry_count_tokens=False) as (env, _),
        foundry_gateway(env) as url,
        _client(url) as client,
    ):
        with pytest.raises(anthropic.APIStatusError) as info:
            await client.messages.count_tokens(model=MODEL, messages=USER)
    assert info.value.status_code == 501 and error_of(info.value)["type"] == "not_supported"
    assert info.value.response.headers["x-should-retry"] == "false"


async def test_injected_entra_token_source_is_cached_until_near_expiry(tmp_path: Path) -> None:
    now = [1_000_000.0]
    fetched: list[str] = []

    def source() -> tuple[str, float]:
        assert threading.current_thread() is not threading.main_thread()  # off the event loop
        fetched.append(ENTRA_TOKEN)
        return ENTRA_TOKEN, now[0] + 3600

    async with (
        foundry_upstream(tmp_path) as (env, emulator),
        foundry_gateway(_no_key(env), token_source=source, clock=lambda: now[0]) as url,
    ):
        client = _client(url)
        await client.messages.create(model=MODEL, max_tokens=8, messages=USER)
        await client.messages.count_tokens(model=MODEL, messages=USER)
        assert len(fetched) == 1
        now[0] += 3400
        await client.messages.create(model=MODEL, max_tokens=8, messages=USER)
        assert len(fetched) == 2
    for request in emulator.requests:
        assert request.header("authorization") == f"Bearer {ENTRA_TOKEN}"
        assert request.header("x-api-key") is None and request.header("api-key") is None


async def test_entra_token_source_failure_is_401_without_retry(tmp_path: Path) -> None:
    def broken() -> tuple[str, float]:
        raise RuntimeError("tenant 1234 has no such app")

    async with (
        foundry_upstream(tmp_path) as (env, emulator),
        foundry_gateway(_no_key(env), token_source=broken) as url,
    ):
        with pytest.raises(anthropic.AuthenticationError) as info:
            await _client(url).messages.create(model=MODEL, max_tokens=8, messages=USER)
    assert info.value.response.headers["x-should-retry"] == "false" and "1234" not in info.value.message
    assert not emulator.requests


def _no_azure_credential(monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
    """An environment where ``DefaultAzureCredential`` finds nothing: no Azure variables, an empty
    home and PATH (no Azure CLI, PowerShell or azd), and its "dev" set (no managed identity, whose
    probe would depend on the machine the tests run on)."""
    for name in list(os.environ):
        if name.startswith(("AZURE_", "IDENTITY_", "MSI_")):
            monkeypatch.delenv(name)
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("PATH", str(home))
    monkeypatch.setenv("AZURE_TOKEN_CREDENTIALS", "dev")


async def test_no_azure_credential_at_all_is_503(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real DefaultAzureCredential with nothing configured: every credential of its chain is
    unavailable, which it reports as the same ClientAuthenticationError as a refusal; the gateway
    tells them apart (503: the deployment lacks a credential, not the client)."""
    async with foundry_upstream(tmp_path) as (env, emulator):
        _no_azure_credential(monkeypatch, tmp_path / "home")
        async with foundry_gateway(_no_key(env)) as url, _client(url) as client:
            with pytest.raises(anthropic.APIStatusError) as info:
                await client.messages.create(model=MODEL, max_tokens=8, messages=USER)
    assert info.value.status_code == 503, info.value.message
    assert "found no credential" in info.value.message and not emulator.requests


async def test_a_chain_credential_that_tried_and_failed_stays_a_refusal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One credential of the chain attempts and is refused (its error, not "unavailable"): 401."""

    class Credential:
        def __exit__(self, *args: object) -> None:
            pass

    class Refused(Credential):
        def get_token(self, *scopes: str, **kwargs: Any) -> Any:
            raise ClientAuthenticationError(message="AADSTS7000215: Invalid client secret provided.")

    class Unavailable(Credential):
        def get_token(self, *scopes: str, **kwargs: Any) -> Any:
            raise CredentialUnavailableError(message="not configured")

    chain = azure.identity.ChainedTokenCredential(Unavailable(), Refused())
    monkeypatch.setattr(azure.identity, "DefaultAzureCredential", lambda **_: chain)
    async with (
        foundry_upstream(tmp_path) as (env, emulator),
        foundry_gateway(_no_key(env)) as url,
        _client(url) as client,
    ):
        with pytest.raises(anthropic.AuthenticationError) as info:
            await client.messages.create(model=MODEL, max_tokens=8, messages=USER)
    assert "AADSTS7000215" in info.value.message and not emulator.requests


async def test_real_azure_identity_over_tls(tmp_path: Path) -> None:
    """ClientSecretCredential against the emulator's Entra endpoints (HTTPS, test CA, also the
    gateway's upstream TLS): one token, fetched on the first request, used for both."""
    async with foundry_upstream(tmp_path, tls=True) as (env, emulator):
        credential = ClientSecretCredential(
            ENTRA_TENANT,
            ENTRA_CLIENT_ID,
            ENTRA_CLIENT_SECRET,
            authority=emulator.base_url,
            disable_instance_discovery=True,
            connection_verify=ca_bundle(env),
        )
        source = credential_token_source(credential, "https://ai.azure.com/.default")
        async with foundry_gateway(_no_key(env), token_source=source) as url, _client(url) as client:
            await client.messages.create(model=MODEL, max_tokens=8, messages=USER)
            async with client.messages.stream(model=MODEL, max_tokens=8, messages=USER) as stream:
                await stream.get_final_message()
    tokens = [r for r in emulator.requests if r.path.endswith("/oauth2/v2.0/token")]
    assert len(tokens) == 1 and b"scope=https%3A%2F%2Fai.azure.com%2F.default" in tokens[0].body
    api = [r.header("authorization") for r in emulator.requests if r.path.startswith("/anthropic/")]
    assert len(api) == 2 and api[0] == api[1] and (api[0] or "").startswith("Bearer eyJ0eXAi.emu-")


async def test_token_rejected_early_is_refreshed_and_retried(tmp_path: Path) -> None:
    """The emulator expires the Entra token before the gateway expected: Foundry's 401 makes the
    gateway fetch a new token and retry once; the client never sees the 401."""
    clock = ManualClock()
    async with foundry_upstream(tmp_path, clock=clock) as (env, emulator):
        registry = get_tokens(emulator.app)

        def source() -> tuple[str, float]:
            issued = registry.issue(
                "entra-", ENTRA_CLIENT_ID, "https://ai.azure.com/.default", clock.time() + 600
            )
            return issued.token, issued.expires_at

        frozen = clock.time()
        async with (
            foundry_gateway(_no_key(env), token_source=source, clock=lambda: frozen) as url,
            _client(url) as client,
        ):
            await client.messages.create(model=MODEL, max_tokens=8, messages=USER)
            clock.advance(601)
            response = await client.messages.with_raw_response.create(
                model=MODEL, max_tokens=8, messages=USER
            )
    assert response.status_code == 200 and response.headers["x-gateway-retries"] == "1"
    api = [r.header("authorization") for r in emulator.requests]
    assert len(api) == 3 and api[0] == api[1] != api[2] and len(registry) == 2


async def test_default_token_source_needs_azure_identity(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with foundry_upstream(tmp_path) as (env, _):
        settings = gateway_settings(_no_key(env))
    monkeypatch.setattr(foundry_module, "azure_identity_available", lambda: False)
    provider = FoundryProvider(settings)
    with pytest.raises(ConfigError, match="azure-identity"):
        await provider.start()
    assert provider.describe()["credential_source"] == "Entra ID (DefaultAzureCredential)"


async def test_resource_url_and_list_models(tmp_path: Path) -> None:
    settings = gateway_settings(
        {
            "GATEWAY_PROVIDER": "foundry",
            "ANTHROPIC_FOUNDRY_RESOURCE": "acme",
            "ANTHROPIC_FOUNDRY_API_KEY": "k",
        }
    )
    provider = FoundryProvider(settings)
    assert provider.describe()["base_url"] == "https://acme.services.ai.azure.com/anthropic"
    listing = orjson.loads(await (await provider.list_models([], "")).read())
    assert "claude-sonnet-4-6" in [model["id"] for model in listing["data"]]


async def test_an_error_whose_body_is_cut_keeps_its_status() -> None:
    """A 401 whose body the upstream cuts short is still a 401 (not retried as "unreachable":
    a retry would mask the credential problem, and with a one-off 401 would even succeed)."""
    seen: list[bytes] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        seen.append(head.split(b"\r\n", 1)[0])
        writer.write(
            b"HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\ncontent-length: 200\r\n\r\n{"
        )
        await writer.drain()
        writer.close()  # 199 bytes short

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    env = {
        "GATEWAY_PROVIDER": "foundry",
        "ANTHROPIC_FOUNDRY_BASE_URL": f"http://127.0.0.1:{port}/anthropic",
        "ANTHROPIC_FOUNDRY_API_KEY": FOUNDRY_KEY,
    }
    try:
        async with foundry_gateway(env, GATEWAY_MAX_RETRIES="3") as url:
            client = anthropic.AsyncAnthropic(api_key=GATEWAY_KEY, base_url=url, max_retries=0)
            with pytest.raises(anthropic.AuthenticationError):
                await client.messages.create(model=MODEL, max_tokens=16, messages=USER)
            await client.close()
    finally:
        server.close()
        await server.wait_closed()
    assert seen == [b"POST /anthropic/v1/messages HTTP/1.1"]
