"""Bedrock errors, HTTP and in-stream, as Anthropic errors.

Each Bedrock code maps to the status and ``error.type`` the first-party API would use (the table
and its decisions are in the design document); messages go through ``redaction.client_message``
and an unservable model names the client's model, never the upstream id or account.

Details: docs/internals/gateway-providers.md
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import orjson

from gateway.errors import error_body, error_type_for_status
from gateway.headers import header_value, sendable
from gateway.providers.base import BufferedResponse
from gateway.providers.models import unservable_message
from gateway.providers.redaction import client_message

PROVIDER: Final = "bedrock"
INVALID_MODEL_ID: Final = "The provided model identifier is invalid."


@dataclass(frozen=True, slots=True)
class Mapped:
    status: int
    error_type: str
    should_retry: bool | None = None


_AUTH: Final = Mapped(401, "authentication_error", should_retry=False)

BY_CODE: Final[Mapping[str, Mapped]] = {
    "ValidationException": Mapped(400, "invalid_request_error"),
    "ServiceQuotaExceededException": Mapped(429, "rate_limit_error"),
    "AccessDeniedException": Mapped(403, "permission_error"),
    "ResourceNotFoundException": Mapped(404, "not_found_error"),
    "ModelTimeoutException": Mapped(408, "timeout_error"),
    "ModelErrorException": Mapped(500, "api_error"),
    "ModelStreamErrorException": Mapped(500, "api_error"),
    "ThrottlingException": Mapped(429, "rate_limit_error"),
    "ModelNotReadyException": Mapped(429, "rate_limit_error"),
    "InternalServerException": Mapped(500, "api_error"),
    "InternalFailure": Mapped(500, "api_error"),
    "ServiceUnavailableException": Mapped(529, "overloaded_error"),
    "UnrecognizedClientException": _AUTH,
    "InvalidSignatureException": _AUTH,
    "IncompleteSignatureException": _AUTH,
    "ExpiredTokenException": _AUTH,
    "MissingAuthenticationTokenException": _AUTH,
    "InvalidClientTokenId": _AUTH,
}

_BY_STATUS: Final[Mapping[int, Mapped]] = {
    401: _AUTH,
    424: Mapped(500, "api_error"),
    503: Mapped(529, "overloaded_error"),
}

_RELAYED_HEADERS: Final = ("retry-after", "retry-after-ms")


def error_code(headers: Iterable[tuple[str, str]], body: Mapping[str, Any]) -> str:
    """The Bedrock error code, as botocore's rest-json parser finds it."""
    raw = header_value(headers, "x-amzn-errortype")
    if not raw:
        value = body.get("__type") or body.get("code") or ""
        raw = value if isinstance(value, str) else ""
    return raw.split(":", 1)[0].split("#")[-1].strip()


def error_message(body: Mapping[str, Any]) -> str:
    for key in ("message", "Message"):
        value = body.get(key)
        if isinstance(value, str):
            return value
    return ""


def mapped(code: str, upstream_status: int) -> Mapped:
    """The Anthropic status and error type for a Bedrock error code (or, if unknown, its status)."""
    known = BY_CODE.get(code)
    if known is not None:
        return known
    if upstream_status in _BY_STATUS:
        return _BY_STATUS[upstream_status]
    return Mapped(upstream_status, error_type_for_status(upstream_status))


def stream_error(exception_type: str, message: str, *, request_id: str) -> tuple[str, str]:
    """(error.type, client message) for an in-stream exception frame (``throttlingException``...)."""
    code = exception_type[:1].upper() + exception_type[1:]
    target = mapped(code, 500)
    return target.error_type, client_message(
        PROVIDER, target.status, target.error_type, message, anthropic_envelope=False, request_id=request_id
    )


def http_error(
    status: int,
    headers: list[tuple[str, str]],
    body: bytes,
    *,
    request_id: str,
    client_model: str,
) -> BufferedResponse:
    """An Anthropic-shaped error response for a Bedrock HTTP error."""
    try:
        decoded = orjson.loads(body) if body else {}
    except orjson.JSONDecodeError:
        decoded = {}
    if not isinstance(decoded, dict):
        decoded = {}
    code = error_code(headers, decoded)
    target = mapped(code, status)
    original = error_message(decoded)
    unservable = bool(client_model) and (
        target.status == 404 or (code == "ValidationException" and original.strip() == INVALID_MODEL_ID)
    )
    if unservable:
        target = Mapped(404, "not_found_error")
    # The code goes into the logged message, except for 400s, whose exact text may be relayed.
    logged = original if target.status == 400 else f"{code or status}: {original}"
    message = client_message(
        PROVIDER, target.status, target.error_type, logged, anthropic_envelope=False, request_id=request_id
    )
    if unservable:
        message = unservable_message(client_model, PROVIDER)
    out = [("content-type", "application/json")]
    upstream_id = header_value(headers, "x-amzn-requestid")
    if upstream_id and sendable("request-id", upstream_id):
        out.append(("request-id", upstream_id))
    for name in _RELAYED_HEADERS:
        value = header_value(headers, name)
        if value and sendable(name, value):
            out.append((name, value))
    if target.should_retry is not None:
        out.append(("x-should-retry", "true" if target.should_retry else "false"))
    return BufferedResponse(target.status, error_body(target.error_type, message), out)
