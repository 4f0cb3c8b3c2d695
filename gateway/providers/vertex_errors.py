"""Vertex AI error responses, translated to the Anthropic error envelope.

Anthropic-shaped model errors pass through; google.rpc platform errors are mapped by ``status``
(table in the design document) with a generic message. UNAVAILABLE stays a 503, not a 529.

Details: docs/internals/gateway-providers.md
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

import orjson

from gateway.errors import error_body, error_type_for_status
from gateway.headers import relayable_response_headers
from gateway.providers.base import BufferedResponse
from gateway.providers.models import unservable_message
from gateway.providers.redaction import client_message

GOOGLE_STATUS: Final[Mapping[str, tuple[int, str]]] = {
    "INVALID_ARGUMENT": (400, "invalid_request_error"),
    "FAILED_PRECONDITION": (400, "invalid_request_error"),
    "OUT_OF_RANGE": (400, "invalid_request_error"),
    "UNAUTHENTICATED": (401, "authentication_error"),
    "PERMISSION_DENIED": (403, "permission_error"),
    "NOT_FOUND": (404, "not_found_error"),
    "ABORTED": (409, "conflict_error"),
    "ALREADY_EXISTS": (409, "conflict_error"),
    "RESOURCE_EXHAUSTED": (429, "rate_limit_error"),
    "CANCELLED": (500, "api_error"),
    "INTERNAL": (500, "api_error"),
    "UNKNOWN": (500, "api_error"),
    "DATA_LOSS": (500, "api_error"),
    "UNIMPLEMENTED": (501, "not_supported"),
    "UNAVAILABLE": (503, "api_error"),
    "DEADLINE_EXCEEDED": (504, "timeout_error"),
}

NO_RETRY_STATUSES: Final = frozenset({401, 501})
"""Statuses sent with ``x-should-retry: false`` (a retry cannot succeed)."""

_DROP_HEADERS: Final = frozenset({"content-type", "x-should-retry"})


def _decode(body: bytes) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return None


def anthropic_error(document: Any) -> tuple[str, str] | None:
    """``(type, message)`` of an Anthropic error envelope, else ``None``."""
    if isinstance(document, dict) and document.get("type") == "error":
        error = document.get("error")
        if isinstance(error, dict) and isinstance(error.get("type"), str):
            message = error.get("message")
            return error["type"], message if isinstance(message, str) else ""
    return None


def google_error(document: Any) -> tuple[str, int | None, str] | None:
    """``(status name, numeric code, message)`` of a google.rpc error (bare or in an array)."""
    if isinstance(document, list) and len(document) == 1:
        document = document[0]
    if not isinstance(document, dict):
        return None
    error = document.get("error")
    if not isinstance(error, dict) or not any(key in error for key in ("status", "code")):
        return None
    status = error.get("status")
    code = error.get("code")
    message = error.get("message")
    return (
        status if isinstance(status, str) else "",
        code if isinstance(code, int) and not isinstance(code, bool) else None,
        message if isinstance(message, str) else "",
    )


def _classify(http_status: int, document: Any, raw: bytes) -> tuple[int, str, str, bool]:
    """``(status, error.type, upstream message, anthropic envelope?)`` for an error body."""
    envelope = anthropic_error(document)
    if envelope is not None:
        return http_status, envelope[0], envelope[1], True
    google = google_error(document)
    if google is not None:
        name, code, message = google
        mapped = GOOGLE_STATUS.get(name)
        if mapped is None:
            status = code if code is not None and 400 <= code <= 599 else http_status
            mapped = (status, error_type_for_status(status))
        return mapped[0], mapped[1], message, False
    text = raw[:500].decode("utf-8", "replace")
    return http_status, error_type_for_status(http_status), text, False


def vertex_error_response(
    http_status: int,
    body: bytes,
    upstream_headers: Iterable[tuple[str, str]],
    request_id: str,
    client_model: str = "",
) -> BufferedResponse:
    """The Anthropic-shaped answer for a non-2xx Vertex response (``client_model``: the model the
    client asked for, on model calls)."""
    status, error_type, message, envelope = _classify(http_status, _decode(body), body)
    if status < 400:  # a redirect or other non-error status is a failure of the upstream
        status, error_type = 502, "api_error"
    text = client_message(
        "vertex", status, error_type, message, anthropic_envelope=envelope, request_id=request_id
    )
    if status == 404 and client_model:
        error_type, text = "not_found_error", unservable_message(client_model, "vertex")
    headers = [
        (name, value)
        for name, value in relayable_response_headers(upstream_headers)
        if name.lower() not in _DROP_HEADERS
    ]
    headers.append(("content-type", "application/json"))
    if status in NO_RETRY_STATUSES:
        headers.append(("x-should-retry", "false"))
    return BufferedResponse(status=status, body=error_body(error_type, text), headers=headers)
