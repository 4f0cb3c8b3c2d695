"""The Vertex AI emulator as the SDK's own ``AnthropicVertex`` client and google-auth see it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import google.auth.exceptions
import google.auth.transport.requests
import orjson
import pytest
from google.oauth2 import service_account

from emulators import EmulatorConfig, ManualClock, RunningEmulator, emulator_in_thread, run_emulator
from tests.providers.vertex_harness import (
    PROJECT,
    REGION,
    SERVICE_ACCOUNT,
    error_of,
    follow_up,
    google_auth_follows,
    other_key,
    public_pem,
    service_account_key,
    write_service_account,
)

TOKEN = "ya29.test"
MODEL = "claude-sonnet-4-5@20250929"
USER: Any = [{"role": "user", "content": "Hello Vertex"}]
WEATHER_TOOL: Any = {
    "name": "get_weather",
    "description": "Weather for a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def _config(**overrides: Any) -> EmulatorConfig:
    options: dict[str, Any] = {
        "vertex_projects": frozenset({PROJECT}),
        "vertex_locations": frozenset({REGION}),
        "vertex_tokens": frozenset({TOKEN}),
        "vertex_service_accounts": {SERVICE_ACCOUNT: public_pem(service_account_key())},
        "retry_after_ms": 1,
    }
    options.update(overrides)
    return EmulatorConfig(**options)


_OPEN_CLIENTS: list[anthropic.AsyncAnthropicVertex] = []


@pytest.fixture(autouse=True)
async def _close_clients() -> AsyncIterator[None]:
    yield
    while _OPEN_CLIENTS:
        await _OPEN_CLIENTS.pop().close()


@pytest.fixture
async def emu() -> AsyncIterator[RunningEmulator]:
    async with run_emulator(_config(clock=ManualClock()), provider="vertex") as running:
        yield running


def _client(emu: RunningEmulator, **kwargs: Any) -> anthropic.AsyncAnthropicVertex:
    options: dict[str, Any] = {
        "region": REGION,
        "project_id": PROJECT,
        "access_token": TOKEN,
        "base_url": emu.base_url + "/v1",
        "max_retries": 0,
    }
    options.update(kwargs)
    client = anthropic.AsyncAnthropicVertex(**options)
    _OPEN_CLIENTS.append(client)
    return client


def _predict_path(model: str = MODEL, verb: str = "rawPredict", project: str = PROJECT) -> str:
    return f"/v1/projects/{project}/locations/{REGION}/publishers/anthropic/models/{model}:{verb}"


def test_sync_client_create() -> None:
    with emulator_in_thread(_config(), provider="vertex") as emu:
        client = anthropic.AnthropicVertex(
            region=REGION,
            project_id=PROJECT,
            access_token=TOKEN,
            base_url=emu.base_url + "/v1",
            max_retries=0,
        )
        message = client.messages.create(model=MODEL, max_tokens=64, messages=USER)
    assert message.content[0].type == "text" and message.content[0].text == "Echo: Hello Vertex"
    assert message.model == "claude-sonnet-4-5-20250929"


async def test_create_and_the_request_the_sdk_sent(emu: RunningEmulator) -> None:
    message = await _client(emu).messages.create(model=MODEL, max_tokens=64, messages=USER)
    assert message.stop_reason == "end_turn" and message.usage.input_tokens > 0
    (request,) = emu.requests
    assert request.path == _predict_path()
    body = request.json()
    assert "model" not in body and body["anthropic_version"] == anthropic._constants.ANTHROPIC_API_VERSION
    assert request.header("anthropic-version") is None
    assert request.header("authorization") == f"Bearer {TOKEN}"


async def test_stream_final_message(emu: RunningEmulator) -> None:
    async with _client(emu).messages.stream(model=MODEL, max_tokens=64, messages=USER) as stream:
        message = await stream.get_final_message()
    assert message.content[0].type == "text" and message.content[0].text == "Echo: Hello Vertex"
    assert message.usage.output_tokens > 1
    assert emu.requests[0].path == _predict_path(verb="streamRawPredict")
    assert emu.requests[0].json()["stream"] is True


async def test_count_tokens_keeps_model_in_body(emu: RunningEmulator) -> None:
    count = await _client(emu).messages.count_tokens(model=MODEL, messages=USER)
    assert count.input_tokens > 0
    (request,) = emu.requests
    assert request.path == _predict_path("count-tokens")
    assert request.json()["model"] == MODEL


async def test_tool_use_round_trip(emu: RunningEmulator) -> None:
    client = _client(emu)
    first = await client.messages.create(
        model=MODEL,
        max_tokens=256,
        tools=[WEATHER_TOOL],
        messages=USER,
        extra_headers={"x-emulator-scenario": "tool_use"},
    )
    assert first.stop_reason == "tool_use"
    call = next(block for block in first.content if block.type == "tool_use")
    assert call.name == "get_weather" and "city" in call.input
    second = await client.messages.create(
        model=MODEL,
        max_tokens=256,
        tools=[WEATHER_TOOL],
        messages=follow_up(USER, first, call.id, "sunny"),
        extra_headers={"x-emulator-scenario": "tool_use"},
    )
    assert second.stop_reason == "end_turn"


async def test_thinking(emu: RunningEmulator) -> None:
    message = await _client(emu).messages.create(
        model=MODEL,
        max_tokens=2048,
        thinking={"type": "enabled", "budget_tokens": 1024},
        messages=USER,
    )
    thinking = message.content[0]
    assert thinking.type == "thinking" and thinking.signature


@pytest.mark.parametrize(
    ("status", "exception", "google_status"),
    [
        (401, anthropic.AuthenticationError, "UNAUTHENTICATED"),
        (403, anthropic.PermissionDeniedError, "PERMISSION_DENIED"),
        (404, anthropic.NotFoundError, "NOT_FOUND"),
        (429, anthropic.RateLimitError, "RESOURCE_EXHAUSTED"),
        (503, anthropic.ServiceUnavailableError, "UNAVAILABLE"),
        (504, anthropic.GatewayTimeoutError, "DEADLINE_EXCEEDED"),
    ],
)
async def test_platform_errors_are_google_shaped(
    emu: RunningEmulator, status: int, exception: type[anthropic.APIStatusError], google_status: str
) -> None:
    with pytest.raises(exception) as info:
        await _client(emu).messages.create(
            model=MODEL,
            max_tokens=16,
            messages=USER,
            extra_headers={"x-emulator-scenario": f"error:{status}"},
        )
    assert info.value.status_code == status and info.value.type is None
    error = error_of(info.value)
    assert error["code"] == status and error["status"] == google_status


async def test_quota_error_names_base_model_and_project(emu: RunningEmulator) -> None:
    with pytest.raises(anthropic.RateLimitError) as info:
        await _client(emu).messages.create(
            model=MODEL, max_tokens=16, messages=USER, extra_headers={"x-emulator-scenario": "error:429"}
        )
    message = error_of(info.value)["message"]
    assert "base model: anthropic-claude-sonnet-4-5" in message and PROJECT in message


async def test_stream_errors_come_wrapped_in_an_array(emu: RunningEmulator) -> None:
    with pytest.raises(anthropic.RateLimitError) as info:
        async with _client(emu).messages.stream(
            model=MODEL, max_tokens=16, messages=USER, extra_headers={"x-emulator-scenario": "error:429"}
        ) as stream:
            await stream.get_final_message()
    body = info.value.body
    assert isinstance(body, list) and body[0]["error"]["status"] == "RESOURCE_EXHAUSTED"


@pytest.mark.parametrize(
    ("status", "exception", "error_type"),
    [
        (400, anthropic.BadRequestError, "invalid_request_error"),
        (500, anthropic.InternalServerError, "api_error"),
        (529, anthropic.OverloadedError, "overloaded_error"),
    ],
)
async def test_model_errors_are_anthropic_shaped(
    emu: RunningEmulator, status: int, exception: type[anthropic.APIStatusError], error_type: str
) -> None:
    with pytest.raises(exception) as info:
        await _client(emu).messages.create(
            model=MODEL,
            max_tokens=16,
            messages=USER,
            extra_headers={"x-emulator-scenario": f"error:{status}"},
        )
    assert info.value.status_code == status and info.value.type == error_type


async def test_bad_token_project_and_model(emu: RunningEmulator) -> None:
    with pytest.raises(anthropic.AuthenticationError) as auth:
        await _client(emu, access_token="ya29.wrong").messages.create(
            model=MODEL, max_tokens=16, messages=USER
        )
    assert error_of(auth.value)["status"] == "UNAUTHENTICATED"
    with pytest.raises(anthropic.PermissionDeniedError):
        await _client(emu, project_id="someone-else").messages.create(
            model=MODEL, max_tokens=16, messages=USER
        )
    with pytest.raises(anthropic.NotFoundError) as missing:
        await _client(emu).messages.create(model="claude-haiku-4-5", max_tokens=16, messages=USER)
    assert "Publisher Model" in error_of(missing.value)["message"]


async def _post(emu: RunningEmulator, path: str, body: Any, **headers: str) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            emu.base_url + path,
            data=orjson.dumps(body),
            headers={"authorization": f"Bearer {TOKEN}", "content-type": "application/json", **headers},
        ) as response,
    ):
        return response.status, orjson.loads(await response.read())


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"max_tokens": 8, "messages": USER}, "anthropic_version: Field required"),
        (
            {"model": MODEL, "max_tokens": 8, "messages": USER, "anthropic_version": "vertex-2023-10-16"},
            "model: Extra inputs are not permitted",
        ),
        (
            {"max_tokens": 8, "messages": USER, "tags": ["x"], "anthropic_version": "vertex-2023-10-16"},
            "tags: Extra inputs are not permitted",
        ),
    ],
)
async def test_body_rules_are_anthropic_shaped(emu: RunningEmulator, body: Any, message: str) -> None:
    status, answer = await _post(emu, _predict_path(), body)
    assert status == 400 and answer["error"] == {"type": "invalid_request_error", "message": message}


async def test_request_tags_beta_is_rejected(emu: RunningEmulator) -> None:
    body = {"max_tokens": 8, "messages": USER, "anthropic_version": "vertex-2023-10-16"}
    status, answer = await _post(emu, _predict_path(), body, **{"anthropic-beta": "request-tags-2026-08-21"})
    assert status == 400 and answer["error"]["message"] == "Unsupported beta header: request-tags-2026-08-21"


async def test_verb_must_agree_with_stream(emu: RunningEmulator) -> None:
    body = {"max_tokens": 8, "messages": USER, "anthropic_version": "vertex-2023-10-16"}
    status, answer = await _post(emu, _predict_path(), {**body, "stream": True})
    assert status == 400 and answer["error"]["status"] == "INVALID_ARGUMENT"
    status, answer = await _post(emu, _predict_path(verb="streamRawPredict"), body)
    assert status == 400 and answer[0]["error"]["status"] == "INVALID_ARGUMENT"


async def test_request_size_limit() -> None:
    async with run_emulator(_config(vertex_max_request_bytes=1000), provider="vertex") as emu:
        body = {
            "max_tokens": 8,
            "messages": [{"role": "user", "content": "x" * 2000}],
            "anthropic_version": "v",
        }
        status, answer = await _post(emu, _predict_path(), body)
    assert status == 400 and answer["error"]["status"] == "INVALID_ARGUMENT"
    assert (
        answer["error"]["message"].startswith("The request size (")
        and "exceeds 0.001MB limit." in answer["error"]["message"]
    )


async def test_unknown_route_is_google_404(emu: RunningEmulator) -> None:
    status, answer = await _post(emu, f"/v1/projects/{PROJECT}/locations/{REGION}/endpoints/x:predict", {})
    assert status == 404 and answer["error"]["status"] == "NOT_FOUND"


def _credentials(path: Path) -> Any:
    return service_account.Credentials.from_service_account_file(  # type: ignore[no-untyped-call]
        str(path), scopes=["https://www.googleapis.com/auth/cloud-platform"]
    )


async def test_token_endpoint_with_real_google_auth(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = ManualClock()
    google_auth_follows(monkeypatch, clock)
    async with run_emulator(_config(clock=clock, vertex_token_lifetime_s=3600), provider="vertex") as emu:
        credentials = _credentials(write_service_account(tmp_path, emu.base_url + "/token"))
        request = google.auth.transport.requests.Request()
        await _in_thread(credentials.refresh, request)
        assert credentials.token.startswith("ya29.emu-") and credentials.valid
        client = _client(emu, access_token=credentials.token)
        assert (await client.messages.create(model=MODEL, max_tokens=16, messages=USER)).content
        clock.advance(3601)
        with pytest.raises(anthropic.AuthenticationError):
            await client.messages.create(model=MODEL, max_tokens=16, messages=USER)
        token = emu.requests[0]
        assert (
            token.path == "/token"
            and b"grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer" in token.body
        )


async def test_token_endpoint_rejects_an_unknown_key(tmp_path: Path) -> None:
    async with run_emulator(_config(), provider="vertex") as emu:
        path = write_service_account(tmp_path, emu.base_url + "/token", key=other_key())
        with pytest.raises(google.auth.exceptions.RefreshError, match="Invalid JWT Signature"):
            await _in_thread(_credentials(path).refresh, google.auth.transport.requests.Request())


async def test_a_deleted_key_is_refused_and_its_tokens_stay_valid(tmp_path: Path) -> None:
    """A key rotated in the emulator's configuration (a new key created, the old one deleted):
    assertions signed with the old key get Google's ``invalid_grant`` / ``Invalid JWT Signature.``,
    the new key's are accepted, and a token issued before the deletion still works until it
    expires (deleting a key does not revoke the short-lived credentials issued with it)."""
    async with run_emulator(_config(), provider="vertex") as emu:
        old = _credentials(write_service_account(tmp_path, emu.base_url + "/token"))
        await _in_thread(old.refresh, google.auth.transport.requests.Request())
        emu.accept_keys(vertex_service_accounts={SERVICE_ACCOUNT: public_pem(other_key())})
        with pytest.raises(google.auth.exceptions.RefreshError, match="Invalid JWT Signature") as info:
            await _in_thread(old.refresh, google.auth.transport.requests.Request())
        assert info.value.args[1]["error"] == "invalid_grant"
        issued_before = _client(emu, access_token=old.token)
        assert (await issued_before.messages.create(model=MODEL, max_tokens=16, messages=USER)).content
        new = _credentials(write_service_account(tmp_path, emu.base_url + "/token", key=other_key()))
        await _in_thread(new.refresh, google.auth.transport.requests.Request())
        assert new.token.startswith("ya29.emu-") and new.token != old.token


async def _in_thread(function: Any, *args: Any) -> Any:
    return await asyncio.get_running_loop().run_in_executor(None, function, *args)
