"""Anthropic-shaped errors made by the gateway itself.

Every error a client receives from the gateway (as opposed to one relayed from the upstream) has
the Anthropic envelope ``{"type":"error","error":{"type":...,"message":...}}`` and the status the
Anthropic API would use for that error type, so SDK clients map it to the right exception class
and retry policy. ``x-should-retry`` is set explicitly where the client must not retry (auth).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, TypeGuard

import orjson

# status -> error.type, as the first-party API uses them
ERROR_TYPE_BY_STATUS: Final[Mapping[int, str]] = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    408: "timeout_error",
    409: "conflict_error",
    411: "invalid_request_error",
    413: "request_too_large",
    415: "invalid_request_error",
    429: "rate_limit_error",
    500: "api_error",
    501: "not_supported",
    502: "api_error",
    503: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}


STATUS_BY_ERROR_TYPE: Final[Mapping[str, int]] = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}
"""error.type -> the status the first-party API answers it with (its "HTTP errors" table)."""


ANTHROPIC_ERROR_TYPES: Final = frozenset(ERROR_TYPE_BY_STATUS.values()) | frozenset(STATUS_BY_ERROR_TYPE)
"""The error types the API publishes: a metric label takes one of these or ``other`` (the type
comes from the upstream's body, and an upstream may send anything)."""


def error_type_label(error_type: str) -> str:
    return error_type if error_type in ANTHROPIC_ERROR_TYPES else "other"


def status_for_error_type(error_type: str) -> int:
    """The status an error of ``error_type`` comes with (500 for a type not in the table)."""
    return STATUS_BY_ERROR_TYPE.get(error_type, 500)


def error_type_for_status(status: int) -> str:
    if status in ERROR_TYPE_BY_STATUS:
        return ERROR_TYPE_BY_STATUS[status]
    return "api_error" if status >= 500 else "invalid_request_error"


def error_type_of(body: bytes, status: int) -> str:
    """The ``error.type`` of an Anthropic-shaped error body, else the status's usual type."""
    try:
        parsed = orjson.loads(body)
        error_type = parsed["error"]["type"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return error_type_for_status(status)
    return error_type if plausible_error_type(error_type) else error_type_for_status(status)


MAX_ERROR_TYPE: Final = 64
"""The longest ``error.type`` taken from an upstream (the API's are at most 25 characters): a longer
one is no type at all, and would only bloat the access log line that records it."""


def plausible_error_type(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and 0 < len(value) <= MAX_ERROR_TYPE


def error_body(error_type: str, message: str, request_id: str | None = None) -> bytes:
    body: dict[str, object] = {"type": "error", "error": {"type": error_type, "message": message}}
    if request_id is not None:
        body["request_id"] = request_id
    return orjson.dumps(body)


class GatewayError(Exception):
    """An error the gateway answers itself, with an explicit status and Anthropic error type."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        error_type: str | None = None,
        should_retry: bool | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.error_type = error_type or error_type_for_status(status)
        self.should_retry = should_retry
        self.headers: dict[str, str] = dict(headers or {})
        self.retryable = False  # whether the gateway's own retry loop may try again

    def advising(self, *, retry: bool) -> GatewayError:
        """This error, telling the client whether to retry (``x-should-retry``)."""
        self.should_retry = retry
        return self

    def body(self, request_id: str | None = None) -> bytes:
        return error_body(self.error_type, self.message, request_id)

    def response_headers(self) -> dict[str, str]:
        headers = {"content-type": "application/json", **self.headers}
        if self.should_retry is not None:
            headers["x-should-retry"] = "true" if self.should_retry else "false"
        return headers


class ClientInputError(GatewayError):
    """The client's own input is at fault (an unknown model, a missing field): never counted as an
    upstream error, though it is found while preparing the upstream request."""


class UpstreamUnavailable(GatewayError):
    """The upstream could not be reached (DNS, refused, TLS, proxy): 502."""

    def __init__(self, message: str, *, retryable: bool = True) -> None:
        super().__init__(502, message, error_type="api_error")
        self.retryable = retryable


class UpstreamTimeout(GatewayError):
    """The upstream did not answer in time: 504."""

    def __init__(self, message: str) -> None:
        super().__init__(504, message, error_type="timeout_error")
        self.retryable = True
