"""Vertex pieces on their own: hosts, paths, error translation, the token cache."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import anthropic
import orjson
import pytest

from gateway.providers.token_cache import TokenCache
from gateway.providers.vertex import model_path, vertex_base_url
from gateway.providers.vertex_errors import vertex_error_response
from tests.providers.vertex_harness import GATEWAY_KEY, predict_requests, vertex_gateway, vertex_upstream


@pytest.mark.parametrize(
    ("region", "expected"),
    [
        ("us-east5", "https://us-east5-aiplatform.googleapis.com/v1"),
        ("europe-west1", "https://europe-west1-aiplatform.googleapis.com/v1"),
        ("global", "https://aiplatform.googleapis.com/v1"),
        ("us", "https://aiplatform.us.rep.googleapis.com/v1"),
        ("eu", "https://aiplatform.eu.rep.googleapis.com/v1"),
    ],
)
def test_region_hosts(region: str, expected: str) -> None:
    assert vertex_base_url(region) == expected


def test_base_url_override_includes_v1() -> None:
    assert vertex_base_url("us-east5", "http://127.0.0.1:9/v1/") == "http://127.0.0.1:9/v1"


def test_model_path_encoding() -> None:
    assert model_path("p", "us-east5", "claude-sonnet-4-5@20250929", "rawPredict") == (
        "/projects/p/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929:rawPredict"
    )
    assert model_path("p", "global", "a;b@1", "streamRawPredict").endswith("/models/a%3Bb@1:streamRawPredict")


async def test_encoded_model_reaches_the_wire(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with (
        vertex_upstream(tmp_path, monkeypatch) as (env, emulator),
        vertex_gateway(env, GATEWAY_MODEL_MAP='{"custom": "claude-x;y@20250101"}') as url,
        anthropic.AsyncAnthropic(api_key=GATEWAY_KEY, base_url=url, max_retries=0) as client,
    ):
        with pytest.raises(anthropic.NotFoundError):
            await client.messages.create(
                model="custom", max_tokens=8, messages=[{"role": "user", "content": "x"}]
            )
    assert predict_requests(emulator)[0].path.endswith("/models/claude-x%3By@20250101:rawPredict")


def _translate(
    status: int, body: Any, headers: list[tuple[str, str]] | None = None
) -> tuple[int, Any, dict[str, str]]:
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    response = vertex_error_response(status, raw, headers or [], "req-1")
    return response.status, orjson.loads(response.body), dict(response.headers)


def _google(code: int, status: str, message: str = "projects/secret-project denied") -> Any:
    return {"error": {"code": code, "message": message, "status": status}}


@pytest.mark.parametrize(
    ("http", "google", "status", "error_type"),
    [
        (400, "INVALID_ARGUMENT", 400, "invalid_request_error"),
        (400, "FAILED_PRECONDITION", 400, "invalid_request_error"),
        (401, "UNAUTHENTICATED", 401, "authentication_error"),
        (403, "PERMISSION_DENIED", 403, "permission_error"),
        (404, "NOT_FOUND", 404, "not_found_error"),
        (429, "RESOURCE_EXHAUSTED", 429, "rate_limit_error"),
        (500, "INTERNAL", 500, "api_error"),
        (501, "UNIMPLEMENTED", 501, "not_supported"),
        (503, "UNAVAILABLE", 503, "api_error"),
        (504, "DEADLINE_EXCEEDED", 504, "timeout_error"),
        (499, "CANCELLED", 500, "api_error"),
    ],
)
@pytest.mark.parametrize("wrapped", [False, True])
def test_google_errors(http: int, google: str, status: int, error_type: str, wrapped: bool) -> None:
    body = _google(http, google)
    got_status, got, headers = _translate(http, [body] if wrapped else body)
    assert got_status == status and got["type"] == "error" and got["error"]["type"] == error_type
    assert "secret-project" not in got["error"]["message"] and "req-1" in got["error"]["message"]
    assert headers.get("x-should-retry") == ("false" if status in (401, 501) else None)
    assert headers["content-type"] == "application/json"


def test_unknown_google_status_uses_the_code() -> None:
    status, got, _ = _translate(418, _google(409, "SOMETHING_NEW"))
    assert status == 409 and got["error"]["type"] == "conflict_error"


def test_request_size_error_is_input_is_too_long() -> None:
    size = _google(400, "INVALID_ARGUMENT", "The request size (31457281 bytes) exceeds 30.000MB limit.")
    assert _translate(400, size)[1]["error"] == {
        "type": "invalid_request_error",
        "message": "Input is too long.",
    }
    message = _google(400, "INVALID_ARGUMENT", "The message size (40000000 bytes) exceeds the limit.")
    assert _translate(400, [message])[1]["error"]["message"] == "Input is too long."


def test_anthropic_envelope_passes_through_with_redaction() -> None:
    too_long = {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "prompt is too long: 9 > 8"},
    }
    status, got, _ = _translate(400, too_long, [("request-id", "req_up"), ("retry-after", "3")])
    assert status == 400 and got["error"]["message"] == "prompt is too long: 9 > 8"
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded project-x"}}
    status, got, headers = _translate(529, overloaded, [("retry-after", "3")])
    assert (
        status == 529
        and got["error"]["type"] == "overloaded_error"
        and "project-x" not in got["error"]["message"]
    )
    assert headers["retry-after"] == "3"


def test_non_json_error_keeps_status() -> None:
    status, got, _ = _translate(502, b"<html>Bad Gateway at 10.0.0.1</html>")
    assert status == 502 and got["error"]["type"] == "api_error" and "10.0.0.1" not in got["error"]["message"]


async def test_token_cache_shares_one_refresh_and_honours_the_margin() -> None:
    now = [1000.0]
    calls: list[int] = []
    gate = threading.Event()

    def fetch() -> tuple[str, float]:
        gate.wait(5)
        calls.append(1)
        return f"token-{len(calls)}", now[0] + 600

    cache = TokenCache(fetch, margin_s=300, clock=lambda: now[0])
    waiters = [asyncio.create_task(cache.token()) for _ in range(5)]
    await asyncio.sleep(0.01)
    gate.set()
    assert await asyncio.gather(*waiters) == ["token-1"] * 5 and len(calls) == 1
    now[0] += 299
    assert await cache.token() == "token-1"
    now[0] += 2  # within 300 s of expiry
    assert await cache.token() == "token-2"
    assert await cache.refresh() is True and await cache.token() == "token-3"
    assert cache.refreshes == 3


async def test_token_cache_refreshes_short_lived_tokens_at_half_life() -> None:
    now = [0.0]
    count = [0]

    def fetch() -> tuple[str, float]:
        count[0] += 1
        return f"t{count[0]}", now[0] + 100  # shorter than twice the 300 s margin

    cache = TokenCache(fetch, clock=lambda: now[0])
    assert await cache.token() == "t1"
    now[0] = 49
    assert await cache.token() == "t1"
    now[0] = 51
    assert await cache.token() == "t2" and cache.expires_at == 151
