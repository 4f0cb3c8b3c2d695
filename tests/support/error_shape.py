"""What every error answer must look like: the Anthropic envelope, as JSON, and nothing echoed."""

from __future__ import annotations

from typing import Any

import orjson

from tests.support.raw_http import RawResponse


def anthropic_error(response: RawResponse) -> dict[str, Any]:
    """The ``error`` object of an Anthropic-shaped JSON error answer (fails the test otherwise)."""
    content_type = response.header("content-type") or ""
    assert content_type.startswith("application/json"), (response.status, content_type, response.body[:300])
    try:
        body = orjson.loads(response.body)
    except orjson.JSONDecodeError:
        raise AssertionError(f"error body is not JSON: {response.status} {response.body[:300]!r}") from None
    assert isinstance(body, dict) and body.get("type") == "error", body
    error = body.get("error")
    assert isinstance(error, dict), body
    assert isinstance(error.get("type"), str) and error["type"], body
    assert isinstance(error.get("message"), str), body
    return error


def assert_error(response: RawResponse, status: int, error_type: str) -> dict[str, Any]:
    assert response.status == status, (response.status, response.body[:300])
    error = anthropic_error(response)
    assert error["type"] == error_type, error
    return error
