"""The Bedrock emulator against the SDK's own Bedrock client (SigV4 and API key) and botocore."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import anthropic
import orjson
import pytest
from anthropic.lib.bedrock._stream_decoder import AWSEventStreamDecoder
from anthropic.types import MessageParam, ToolParam
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.eventstream import EventStreamBuffer

from emulators import EmulatorConfig, ManualClock, RunningEmulator, run_emulator
from emulators.bedrock_config import (
    DEFAULT_ACCESS_KEY_ID,
    DEFAULT_API_KEY,
    DEFAULT_PROFILE_ARN,
    DEFAULT_SECRET_ACCESS_KEY,
)
from tests.providers.bedrock_harness import serve_bedrock_emulator

MODEL = "us.anthropic.claude-sonnet-4-6"
TOOL: ToolParam = {
    "name": "lookup",
    "description": "Look something up",
    "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
}


@pytest.fixture
async def emu() -> AsyncIterator[RunningEmulator]:
    async with serve_bedrock_emulator(EmulatorConfig(clock=ManualClock())) as running:
        yield running


def sigv4_client(
    emu: RunningEmulator, secret: str = DEFAULT_SECRET_ACCESS_KEY
) -> anthropic.AsyncAnthropicBedrock:
    return anthropic.AsyncAnthropicBedrock(
        aws_access_key=DEFAULT_ACCESS_KEY_ID,
        aws_secret_key=secret,
        aws_region="us-east-1",
        base_url=emu.base_url,
        max_retries=0,
    )


def bearer_client(emu: RunningEmulator, key: str = DEFAULT_API_KEY) -> anthropic.AsyncAnthropicBedrock:
    return anthropic.AsyncAnthropicBedrock(
        api_key=key, aws_region="us-east-1", base_url=emu.base_url, max_retries=0
    )


def block(message: Any, index: int) -> Any:
    """Content block ``index`` of an SDK message, untyped (tests check the type themselves)."""
    return message.content[index]


def error_of(exc: anthropic.APIStatusError) -> Any:
    """The ``error`` object of an Anthropic error body."""
    assert isinstance(exc.body, dict)
    return exc.body["error"]


def user(text: str) -> list[MessageParam]:
    return [{"role": "user", "content": text}]


async def test_sdk_sigv4_create_and_headers(emu: RunningEmulator) -> None:
    raw = await sigv4_client(emu).messages.with_raw_response.create(
        model=MODEL, max_tokens=32, messages=user("hi")
    )
    message = await raw.parse()
    assert block(message, 0).text == "Echo: hi"
    assert message.model == "claude-sonnet-4-6"
    assert raw.headers["x-amzn-bedrock-input-token-count"] == str(message.usage.input_tokens)
    assert raw.headers["x-amzn-bedrock-output-token-count"] == str(message.usage.output_tokens)
    assert raw.headers["x-amzn-bedrock-cache-read-input-token-count"] == "0"
    assert raw.headers["x-amzn-requestid"]
    recorded = emu.requests[-1]
    assert recorded.path == f"/model/{MODEL}/invoke"
    assert set(recorded.json()) == {"max_tokens", "messages", "anthropic_version"}


async def test_sdk_stream_tool_use_and_thinking(emu: RunningEmulator) -> None:
    client = bearer_client(emu)
    async with client.messages.stream(
        model=MODEL,
        max_tokens=2048,
        thinking={"type": "enabled", "budget_tokens": 1024},
        tools=[TOOL],
        messages=user("find it [[scenario:tool_use]]"),
    ) as stream:
        final = await stream.get_final_message()
    assert [b.type for b in final.content] == ["thinking", "text", "tool_use"]
    assert final.stop_reason == "tool_use"
    assert block(final, 2).input == {"q": "q example"}


async def test_sdk_errors(emu: RunningEmulator) -> None:
    client = bearer_client(emu)
    cases: list[tuple[str, type[anthropic.APIStatusError], int]] = [
        ("error:429", anthropic.RateLimitError, 429),
        ("error:400", anthropic.BadRequestError, 400),
        ("error:403", anthropic.PermissionDeniedError, 403),
        ("error:404", anthropic.NotFoundError, 404),
        ("error:500", anthropic.InternalServerError, 500),
        ("error:503", anthropic.APIStatusError, 503),
    ]
    for scenario, exception, status in cases:
        with pytest.raises(exception) as info:
            await client.messages.create(
                model=MODEL, max_tokens=8, messages=user("x"), extra_headers={"x-emulator-scenario": scenario}
            )
        assert info.value.status_code == status
        assert info.value.response.headers["x-amzn-errortype"].split(":")[0].endswith("Exception")
        assert isinstance(info.value.body, dict) and set(info.value.body) >= {"message"}


async def test_stream_exception_frame_reaches_the_sdk(emu: RunningEmulator) -> None:
    with pytest.raises(anthropic.APIStatusError) as info:
        async with sigv4_client(emu).messages.stream(
            model=MODEL,
            max_tokens=64,
            messages=user("x [[scenario:stream_error]]"),
            extra_headers={"x-emulator-stream-exception": "throttlingException"},
        ) as stream:
            await stream.get_final_message()
    assert error_of(info.value)["type"] == "throttlingException"


async def test_bad_signature_and_unknown_key_are_403(emu: RunningEmulator) -> None:
    with pytest.raises(anthropic.PermissionDeniedError) as info:
        await sigv4_client(emu, secret="wrong").messages.create(model=MODEL, max_tokens=8, messages=user("x"))
    assert info.value.response.headers["x-amzn-errortype"].startswith("InvalidSignatureException:")
    unknown = anthropic.AsyncAnthropicBedrock(
        aws_access_key="AKIDUNKNOWN",
        aws_secret_key="x",
        aws_region="us-east-1",
        base_url=emu.base_url,
        max_retries=0,
    )
    with pytest.raises(anthropic.PermissionDeniedError) as info:
        await unknown.messages.create(model=MODEL, max_tokens=8, messages=user("x"))
    assert info.value.response.headers["x-amzn-errortype"].startswith("UnrecognizedClientException:")
    with pytest.raises(anthropic.PermissionDeniedError) as info:
        await bearer_client(emu, key="not-a-key").messages.create(
            model=MODEL, max_tokens=8, messages=user("x")
        )
    wrong_region = anthropic.AsyncAnthropicBedrock(
        aws_access_key=DEFAULT_ACCESS_KEY_ID,
        aws_secret_key=DEFAULT_SECRET_ACCESS_KEY,
        aws_region="eu-west-1",
        base_url=emu.base_url,
        max_retries=0,
    )
    with pytest.raises(anthropic.PermissionDeniedError):
        await wrong_region.messages.create(model=MODEL, max_tokens=8, messages=user("x"))


def _signed(emu: RunningEmulator, path: str, body: bytes) -> tuple[str, dict[str, str]]:
    url = emu.base_url + path
    request = AWSRequest("POST", url, data=body, headers={"Content-Type": "application/json"})
    SigV4Auth(Credentials(DEFAULT_ACCESS_KEY_ID, DEFAULT_SECRET_ACCESS_KEY), "bedrock", "us-east-1").add_auth(
        request
    )
    return url, dict(request.headers.items())


async def _post(url: str, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, str], bytes]:
    async with aiohttp.ClientSession() as http, http.post(url, data=body, headers=headers) as response:
        return response.status, dict(response.headers), await response.read()


async def test_tampered_body_is_rejected(emu: RunningEmulator) -> None:
    body = orjson.dumps({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 8, "messages": user("a")})
    url, headers = _signed(emu, f"/model/{MODEL}/invoke", body)
    status, _, _ = await _post(url, headers, body)
    assert status == 200
    status, response_headers, _ = await _post(url, headers, body.replace(b'"a"', b'"b"'))
    assert status == 403
    assert response_headers["x-amzn-ErrorType"].startswith("InvalidSignatureException")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {"max_tokens": 8, "messages": user("a")},
            "Malformed input request: #: required key [anthropic_version] not found, please reformat your "
            "input and try again.",
        ),
        (
            {"anthropic_version": "bedrock-2023-05-31", "model": "x", "max_tokens": 8, "messages": user("a")},
            "Malformed input request: #: extraneous key [model] is not permitted, please reformat your input "
            "and try again.",
        ),
        (
            {
                "anthropic_version": "bedrock-2023-05-31",
                "stream": True,
                "max_tokens": 8,
                "messages": user("a"),
            },
            "Malformed input request: #: extraneous key [stream] is not permitted, please reformat your input "
            "and try again.",
        ),
        (
            {
                "anthropic_version": "bedrock-2023-05-31",
                "anthropic_beta": "x",
                "max_tokens": 8,
                "messages": [],
            },
            "Malformed input request: #/anthropic_beta: expected type: JSONArray, found: String, please "
            "reformat your input and try again.",
        ),
        (
            {
                "anthropic_version": "bedrock-2023-05-31",
                "anthropic_beta": ["claude-code-20250219"],
                "max_tokens": 8,
                "messages": user("a"),
            },
            "invalid beta flag",
        ),
        (
            {"anthropic_version": "bedrock-2023-05-31", "messages": user("a")},
            "Malformed input request: #: required key [max_tokens] not found, please reformat your input and "
            "try again.",
        ),
        (
            {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 8, "messages": user("a"), "tags": {}},
            "tags: Extra inputs are not permitted",
        ),
        (
            {
                "anthropic_version": "bedrock-2023-05-31",
                "max_tokens": 8,
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": str(i), "cache_control": {"type": "ephemeral"}}
                            for i in range(5)
                        ],
                    }
                ],
            },
            "A maximum of 4 blocks with cache_control may be provided. Found 5.",
        ),
    ],
)
async def test_validation_wording(emu: RunningEmulator, body: dict[str, Any], message: str) -> None:
    raw = orjson.dumps(body)
    url, headers = _signed(emu, f"/model/{MODEL}/invoke", raw)
    status, response_headers, payload = await _post(url, headers, raw)
    assert status == 400
    assert response_headers["x-amzn-ErrorType"].startswith("ValidationException:")
    assert response_headers["x-amzn-RequestId"]
    assert orjson.loads(payload) == {"message": message}


async def test_sdk_version_string_is_accepted(emu: RunningEmulator) -> None:
    body = orjson.dumps(
        {
            "anthropic_version": anthropic._constants.ANTHROPIC_API_VERSION,
            "max_tokens": 8,
            "messages": user("v"),
        }
    )
    url, headers = _signed(emu, f"/model/{MODEL}/invoke", body)
    assert (await _post(url, headers, body))[0] == 200


async def test_unknown_model_and_operation(emu: RunningEmulator) -> None:
    body = orjson.dumps({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 8, "messages": user("a")})
    url, headers = _signed(emu, "/model/anthropic.claude-unknown-v1:0/invoke", body)
    status, response_headers, _ = await _post(url, headers, body)
    assert status == 404 and response_headers["x-amzn-ErrorType"].startswith("ResourceNotFoundException")
    # an ARN whose "/" was not encoded does not route
    url, headers = _signed(
        emu, "/model/arn:aws:bedrock:us-east-1:123456789012:application-inference-profile/x/invoke", body
    )
    assert (await _post(url, headers, body))[0] == 404
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{emu.base_url}/provisioned-model-throughputs") as r:
            assert r.status == 404 and r.headers["x-amzn-ErrorType"].startswith("UnknownOperationException")
        # the control-plane lists exist, and are authenticated like the runtime routes
        async with http.get(f"{emu.base_url}/inference-profiles?type=SYSTEM_DEFINED") as r:
            assert r.status == 403
            assert r.headers["x-amzn-ErrorType"].startswith("MissingAuthenticationTokenException")


async def test_frames_decode_with_botocore_and_the_sdk_decoder(emu: RunningEmulator) -> None:
    body = orjson.dumps(
        {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 64, "messages": user("frames")}
    )
    url, headers = _signed(
        emu, f"/model/{DEFAULT_PROFILE_ARN.replace('/', '%2F')}/invoke-with-response-stream", body
    )
    status, response_headers, raw = await _post(url, headers, body)
    assert status == 200
    assert response_headers["Content-Type"] == "application/vnd.amazon.eventstream"
    buffer = EventStreamBuffer()
    buffer.add_data(raw)
    frames = list(buffer)
    assert all(f.headers[":event-type"] == "chunk" and f.headers[":message-type"] == "event" for f in frames)
    events = [orjson.loads(base64.b64decode(orjson.loads(f.payload)["bytes"])) for f in frames]
    assert events[0]["type"] == "message_start" and "ping" not in [e["type"] for e in events]
    metrics = events[-1]["amazon-bedrock-invocationMetrics"]
    assert set(metrics) == {"inputTokenCount", "outputTokenCount", "invocationLatency", "firstByteLatency"}
    sdk_events = list(
        AWSEventStreamDecoder().iter_bytes(iter([raw[i : i + 7] for i in range(0, len(raw), 7)]))
    )
    assert [e.event for e in sdk_events] == [e["type"] for e in events]


async def test_count_tokens_endpoint(emu: RunningEmulator) -> None:
    invoke = {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 8, "messages": user("count me")}
    wrapped = orjson.dumps(
        {"input": {"invokeModel": {"body": base64.b64encode(orjson.dumps(invoke)).decode()}}}
    )
    url, headers = _signed(emu, "/model/anthropic.claude-sonnet-4-6/count-tokens", wrapped)
    status, _, payload = await _post(url, headers, wrapped)
    assert status == 200
    created = await sigv4_client(emu).messages.create(model=MODEL, max_tokens=8, messages=user("count me"))
    assert orjson.loads(payload) == {"inputTokens": created.usage.input_tokens}
    url, headers = _signed(emu, f"/model/{MODEL}/count-tokens", wrapped)  # an inference profile: refused
    status, response_headers, _ = await _post(url, headers, wrapped)
    assert status == 400 and response_headers["x-amzn-ErrorType"].startswith("ValidationException")


async def test_registered_as_the_bedrock_emulator() -> None:
    async with run_emulator(provider="bedrock") as running:
        client = bearer_client(running)
        message = await client.messages.create(model=MODEL, max_tokens=8, messages=user("registry"))
        assert block(message, 0).text == "Echo: registry"


async def test_an_undecodable_body_is_a_validation_error_not_a_5xx(emu: RunningEmulator) -> None:
    """A body that does not decode under its Content-Encoding: Bedrock's 400 ValidationException
    (a 5xx would be retried)."""
    url, headers = _signed(emu, f"/model/{MODEL}/invoke", b"plain, not gzip")
    async with (
        aiohttp.ClientSession() as http,
        http.post(url, data=b"plain, not gzip", headers={**headers, "Content-Encoding": "gzip"}) as response,
    ):
        assert response.status == 400
        assert response.headers["x-amzn-errortype"].startswith("ValidationException:")
