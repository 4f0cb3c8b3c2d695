"""Bedrock request shaping, error mapping and event-stream translation, piece by piece."""

from __future__ import annotations

import asyncio
import base64
from binascii import crc32

import orjson
import pytest
from botocore.eventstream import EventStreamBuffer

from emulators.bedrock_frames import chunk_frame, encode_frame, exception_frame
from gateway.providers.bedrock_auth import host_header
from gateway.providers.bedrock_errors import http_error, stream_error
from gateway.providers.bedrock_request import (
    count_tokens_body,
    foundation_model_id,
    invoke_body,
    model_path,
    upstream_headers,
)
from gateway.streaming.eventstream import EventStreamResponse, EventStreamToSSE, chunk_to_sse
from gateway.streaming.sse import PING_EVENT

ARN = "arn:aws:bedrock:eu-west-1:123456789012:application-inference-profile/abc123"


def test_model_path_keeps_colons_and_encodes_slashes() -> None:
    assert model_path("us.anthropic.claude-sonnet-4-5-20250929-v1:0", "invoke") == (
        "/model/us.anthropic.claude-sonnet-4-5-20250929-v1:0/invoke"
    )
    assert model_path(ARN, "invoke-with-response-stream") == (
        "/model/arn:aws:bedrock:eu-west-1:123456789012:application-inference-profile%2Fabc123"
        "/invoke-with-response-stream"
    )


def test_invoke_body_shape() -> None:
    payload = {"model": "m", "max_tokens": 5, "stream": True, "tags": {"a": 1}, "messages": [], "system": "s"}
    assert list(invoke_body(payload, ["b-1", "b-2"]).items()) == [
        ("max_tokens", 5),
        ("messages", []),
        ("system", "s"),
        ("anthropic_beta", ["b-1", "b-2"]),
        ("anthropic_version", "bedrock-2023-05-31"),
    ]
    assert "anthropic_beta" not in invoke_body(payload, [])


def test_count_tokens_body() -> None:
    payload = {
        "model": "m",
        "messages": [],
        "tools": [],
        "thinking": {"type": "enabled", "budget_tokens": 5000},
    }
    wrapped = orjson.loads(count_tokens_body(payload, []))
    inner = orjson.loads(base64.b64decode(wrapped["input"]["invokeModel"]["body"]))
    assert inner == {"messages": [], "thinking": payload["thinking"], "anthropic_version": "bedrock-2023-05-31",
                     "max_tokens": 5001}  # fmt: skip
    inner = orjson.loads(
        base64.b64decode(
            orjson.loads(count_tokens_body({"messages": []}, ["x"]))["input"]["invokeModel"]["body"]
        )
    )
    assert inner["max_tokens"] == 1024 and inner["anthropic_beta"] == ["x"]


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("us.anthropic.claude-sonnet-4-6", "anthropic.claude-sonnet-4-6"),
        ("global.anthropic.claude-opus-4-6-v1", "anthropic.claude-opus-4-6-v1"),
        ("anthropic.claude-haiku-4-5-20251001-v1:0", "anthropic.claude-haiku-4-5-20251001-v1:0"),
        (
            "arn:aws:bedrock:us-east-1::foundation-model/anthropic.claude-sonnet-4-6",
            "anthropic.claude-sonnet-4-6",
        ),
        (
            "arn:aws:bedrock:us-east-1:1:inference-profile/eu.anthropic.claude-sonnet-4-6",
            "anthropic.claude-sonnet-4-6",
        ),
        (ARN, None),
        ("arn:aws:bedrock:us-east-1:1:provisioned-model/xyz", None),
    ],
)
def test_foundation_model_id(model: str, expected: str | None) -> None:
    assert foundation_model_id(model) == expected


def test_upstream_headers() -> None:
    headers = upstream_headers(
        [
            ("anthropic-version", "2023-06-01"),
            ("anthropic-beta", "x"),
            ("X-Amz-Date", "forged"),
            ("X-Amzn-Bedrock-GuardrailIdentifier", "g1"),
            ("x-stainless-lang", "js"),
            ("x-app", "a"),
            ("X-App", "b"),
            ("content-type", "text/plain"),
            ("Accept", "text/event-stream"),
        ]
    )
    assert headers == [
        ("X-Amzn-Bedrock-GuardrailIdentifier", "g1"),
        ("x-stainless-lang", "js"),
        ("x-app", "a,b"),
        ("Accept", "application/json"),
        ("Content-Type", "application/json"),
    ]


def test_host_header() -> None:
    assert host_header("https://bedrock-runtime.us-east-1.amazonaws.com/model/x") == (
        "bedrock-runtime.us-east-1.amazonaws.com"
    )
    assert host_header("http://127.0.0.1:8080/x") == "127.0.0.1:8080"
    assert host_header("http://[::1]:80/x") == "[::1]"


def _error(
    code: str, status: int, message: str = "detail with arn:aws:iam::123456789012:role/x"
) -> dict[str, object]:
    response = http_error(
        status,
        [
            ("x-amzn-ErrorType", f"{code}:http://internal.amazon.com/coral/com.amazon.bedrock/"),
            ("x-amzn-RequestId", "rid-1"),
            ("Retry-After", "3"),
        ],
        orjson.dumps({"message": message}),
        request_id="gw-1",
        client_model="claude-x",
    )
    error = orjson.loads(response.body)["error"]
    return {
        "status": response.status,
        "type": error["type"],
        "message": error["message"],
        **dict(response.headers),
    }


@pytest.mark.parametrize(
    ("code", "upstream", "status", "error_type"),
    [
        ("ValidationException", 400, 400, "invalid_request_error"),
        ("ServiceQuotaExceededException", 400, 429, "rate_limit_error"),
        ("AccessDeniedException", 403, 403, "permission_error"),
        ("ResourceNotFoundException", 404, 404, "not_found_error"),
        ("ModelTimeoutException", 408, 408, "timeout_error"),
        ("ModelErrorException", 424, 500, "api_error"),
        ("ThrottlingException", 429, 429, "rate_limit_error"),
        ("ModelNotReadyException", 429, 429, "rate_limit_error"),
        ("InternalServerException", 500, 500, "api_error"),
        ("ServiceUnavailableException", 503, 529, "overloaded_error"),
        ("UnrecognizedClientException", 403, 401, "authentication_error"),
        ("InvalidSignatureException", 403, 401, "authentication_error"),
        ("ExpiredTokenException", 403, 401, "authentication_error"),
        ("SomethingNewException", 503, 529, "overloaded_error"),
        ("SomethingElseException", 418, 418, "invalid_request_error"),
    ],
)
def test_http_error_mapping(code: str, upstream: int, status: int, error_type: str) -> None:
    mapped = _error(code, upstream)
    assert (mapped["status"], mapped["type"]) == (status, error_type)
    assert "123456789012" not in str(mapped["message"])
    assert mapped["request-id"] == "rid-1" and mapped["retry-after"] == "3"
    assert mapped.get("x-should-retry") == ("false" if status == 401 else None)
    if status == 404:
        assert mapped["message"] == (
            "model: claude-x is not served by the bedrock upstream (map it with GATEWAY_MODEL_MAP)"
        )


def test_input_too_long_is_kept_and_type_in_body_is_read() -> None:
    assert _error("ValidationException", 400, "Input is too long.")["message"] == "Input is too long."
    response = http_error(
        403,
        [],
        b'{"__type":"com.amazon.coral.service#ExpiredTokenException","Message":"x"}',
        request_id="r",
        client_model="",
    )
    assert response.status == 401


@pytest.mark.parametrize(
    ("member", "error_type"),
    [
        ("throttlingException", "rate_limit_error"),
        ("modelStreamErrorException", "api_error"),
        ("internalServerException", "api_error"),
        ("serviceUnavailableException", "overloaded_error"),
        ("validationException", "invalid_request_error"),
        ("modelTimeoutException", "timeout_error"),
        ("unheardOfException", "api_error"),
    ],
)
def test_stream_error_mapping(member: str, error_type: str) -> None:
    assert stream_error(member, "secret arn:aws:x", request_id="r")[0] == error_type
    assert "arn:aws" not in stream_error(member, "secret arn:aws:x", request_id="r")[1]


def _translator() -> EventStreamToSSE:
    return EventStreamToSSE(lambda code, message: (f"mapped:{code}", message))


def test_translator_frames_in_any_chunking() -> None:
    data = (
        chunk_frame({"type": "message_start", "message": {"id": "m"}})
        + chunk_frame({"type": "content_block_delta", "delta": {"text": "é\u2028"}})
        + exception_frame("throttlingException", "slow")
        + encode_frame(
            [(":message-type", "error"), (":error-code", "InternalFailure"), (":error-message", "x")], b""
        )
    )
    whole = _translator().feed(data)
    translator = _translator()
    pieces = b"".join(translator.feed(data[i : i + 1]) for i in range(len(data)))
    assert pieces == whole
    assert whole.count(b"event: ") == 4
    assert (
        b'event: error\ndata: {"type":"error","error":{"type":"mapped:throttlingException","message":"slow"}}'
        in whole
    )
    assert b'"type":"mapped:InternalFailure"' in whole


def test_chunk_with_a_line_break_is_reserialised_and_untyped_chunks_dropped() -> None:
    pretty = b'{\n  "type": "ping"\n}'
    payload = orjson.dumps({"bytes": base64.b64encode(pretty).decode()})
    assert chunk_to_sse(payload) == b'event: ping\ndata: {"type":"ping"}\n\n'
    untyped = orjson.dumps({"bytes": base64.b64encode(b'{"x":1}').decode()})
    assert chunk_to_sse(untyped) == b""
    assert chunk_to_sse(b"not json") == b""


def test_corrupt_stream_ends_with_api_error() -> None:
    frame = bytearray(chunk_frame({"type": "message_stop"}))
    frame[-1] ^= 0xFF
    translator = _translator()
    out = translator.feed(bytes(frame))
    assert translator.failed and b'"type":"api_error"' in out
    assert translator.feed(chunk_frame({"type": "message_stop"})) == b""


def test_encoder_matches_botocore() -> None:
    frame = encode_frame([(":event-type", "chunk"), ("x-ünï", "välue")], b"payload")
    buffer = EventStreamBuffer()
    buffer.add_data(frame)
    (message,) = list(buffer)
    assert message.headers == {":event-type": "chunk", "x-ünï": "välue"}
    assert message.payload == b"payload"
    assert int.from_bytes(frame[-4:], "big") == crc32(frame[:-4])
    with pytest.raises(ValueError):
        encode_frame([("a", "1"), ("a", "2")], b"")


async def test_pings_while_the_upstream_is_silent() -> None:
    queue: asyncio.Queue[bytes] = asyncio.Queue()  # get() is cancellation-safe, like readany()

    async def upstream() -> None:
        queue.put_nowait(chunk_frame({"type": "message_start", "message": {}}))
        await asyncio.sleep(0.05)  # silence: several ping intervals
        queue.put_nowait(chunk_frame({"type": "message_stop"}))
        queue.put_nowait(b"")

    producer = asyncio.create_task(upstream())
    response = EventStreamResponse(queue.get, lambda: None, _translator(), headers=[], ping_interval_s=0.01)
    out = [chunk async for chunk in response.iter_chunks()]
    await producer
    assert out[0].startswith(b"event: message_start")
    assert out[-1].startswith(b"event: message_stop")
    assert out.count(PING_EVENT) >= 2
