"""Error statuses, retries, auth and versions as the real SDK sees them."""

from __future__ import annotations

from typing import Any

import anthropic
import pytest

from emulators import DEFAULT_API_KEY, RunningEmulator
from tests.support.emulator_sdk import MODEL, body_of

USER: Any = [{"role": "user", "content": "Hello"}]


@pytest.mark.parametrize(
    ("status", "exception", "error_type"),
    [
        (400, anthropic.BadRequestError, "invalid_request_error"),
        (401, anthropic.AuthenticationError, "authentication_error"),
        (403, anthropic.PermissionDeniedError, "permission_error"),
        (404, anthropic.NotFoundError, "not_found_error"),
        (413, anthropic.RequestTooLargeError, "request_too_large"),
        (429, anthropic.RateLimitError, "rate_limit_error"),
        (500, anthropic.InternalServerError, "api_error"),
        (529, anthropic.OverloadedError, "overloaded_error"),
    ],
)
def test_error_scenarios_map_to_sdk_exceptions(
    client: anthropic.Anthropic, status: int, exception: type[anthropic.APIStatusError], error_type: str
) -> None:
    with pytest.raises(exception) as info:
        client.messages.create(
            model=MODEL,
            max_tokens=16,
            messages=USER,
            extra_headers={"x-emulator-scenario": f"error:{status}"},
        )
    error = info.value
    assert error.status_code == status
    assert error.type == error_type
    assert error.request_id is not None and error.request_id.startswith("req_emu_")
    assert error.body == {
        "type": "error",
        "error": {"type": error_type, "message": body_of(error)["error"]["message"]},
        "request_id": error.request_id,
    }
    assert error.response.headers["request-id"] == error.request_id


def test_429_carries_retry_after(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.RateLimitError) as info:
        client.messages.create(
            model=MODEL,
            max_tokens=16,
            messages=USER,
            extra_headers={"x-emulator-scenario": "error:429"},
        )
    headers = info.value.response.headers
    assert headers["retry-after"] == "1" and headers["retry-after-ms"] == "1"
    assert "rate limit" in info.value.message


def test_error_marker_in_prompt(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.OverloadedError):
        client.messages.create(
            model=MODEL,
            max_tokens=16,
            messages=[{"role": "user", "content": "hi [[scenario:error:529]]"}],
        )


def test_sdk_retries_529_and_the_log_shows_each_attempt(threaded_emu: RunningEmulator) -> None:
    with (
        anthropic.Anthropic(
            api_key=DEFAULT_API_KEY,
            base_url=threaded_emu.base_url,
            max_retries=2,
            default_headers={"x-emulator-scenario": "error:529"},
        ) as client,
        pytest.raises(anthropic.OverloadedError),
    ):
        client.messages.create(model=MODEL, max_tokens=16, messages=USER)
    attempts = [r.header("x-stainless-retry-count") for r in threaded_emu.requests]
    assert attempts == ["0", "1", "2"]


def test_stream_error_arrives_after_http_200(client: anthropic.Anthropic) -> None:
    seen: list[str] = []
    with (
        pytest.raises(anthropic.APIStatusError) as info,
        client.messages.stream(
            model=MODEL,
            max_tokens=64,
            messages=USER,
            extra_headers={"x-emulator-scenario": "stream_error"},
        ) as stream,
    ):
        seen.extend(event.type for event in stream)
    assert info.value.status_code == 200
    assert info.value.type == "overloaded_error"
    assert "message_start" in seen and "text" in seen  # some content arrived before the error


def test_stream_error_without_streaming_is_a_529(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.OverloadedError):
        client.messages.create(
            model=MODEL,
            max_tokens=16,
            messages=USER,
            extra_headers={"x-emulator-scenario": "stream_error"},
        )


def test_wrong_key_is_401(threaded_emu: RunningEmulator) -> None:
    with (
        anthropic.Anthropic(api_key="sk-wrong", base_url=threaded_emu.base_url, max_retries=0) as client,
        pytest.raises(anthropic.AuthenticationError) as info,
    ):
        client.messages.create(model=MODEL, max_tokens=16, messages=USER)
    assert info.value.type == "authentication_error"
    assert body_of(info.value)["error"]["message"] == "invalid x-api-key"


def test_unknown_model_is_404(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.NotFoundError) as info:
        client.messages.create(model="claude-imaginary-9", max_tokens=16, messages=USER)
    assert info.value.type == "not_found_error"
    assert body_of(info.value)["error"]["message"] == "model: claude-imaginary-9"


def test_bad_request_from_validation(client: anthropic.Anthropic) -> None:
    blocks: Any = [
        {"type": "text", "text": f"part {i}", "cache_control": {"type": "ephemeral"}} for i in range(5)
    ]
    with pytest.raises(anthropic.BadRequestError) as info:
        client.messages.create(model=MODEL, max_tokens=16, messages=[{"role": "user", "content": blocks}])
    assert body_of(info.value)["error"]["message"] == (
        "A maximum of 4 blocks with cache_control may be provided. Found 5."
    )


def test_sdk_betas_are_accepted(client: anthropic.Anthropic, threaded_emu: RunningEmulator) -> None:
    message = client.beta.messages.create(
        model=MODEL,
        max_tokens=16,
        messages=USER,
        betas=["interleaved-thinking-2025-05-14", "context-management-2025-06-27", "files-api-2025-04-14"],
    )
    assert message.stop_reason == "end_turn"
    assert threaded_emu.requests[-1].header("anthropic-beta") == (
        "interleaved-thinking-2025-05-14,context-management-2025-06-27,files-api-2025-04-14"
    )
    with pytest.raises(anthropic.BadRequestError) as info:
        client.beta.messages.create(model=MODEL, max_tokens=16, messages=USER, betas=["made-up-2099-01-01"])
    assert body_of(info.value)["error"]["message"] == "Unsupported beta header: made-up-2099-01-01"
