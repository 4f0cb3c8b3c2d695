"""Anthropic API errors: the exception the emulator raises and the catalogue of real types.

An :class:`ApiError` carries everything the wire layer needs (status, ``error.type``, message and
extra headers such as ``retry-after``); the first-party app renders it as
``{"type":"error","error":{"type":..,"message":..},"request_id":..}``. A later Bedrock or Vertex
app can render the same exception in its own envelope.
"""

from __future__ import annotations

from dataclasses import dataclass

from .json_types import JSONObject


@dataclass(frozen=True, slots=True)
class ErrorKind:
    """The ``error.type`` and default message the real API uses for one HTTP status."""

    type: str
    message: str


ERROR_KINDS: dict[int, ErrorKind] = {
    400: ErrorKind("invalid_request_error", "There was an issue with the format or content of your request."),
    401: ErrorKind("authentication_error", "invalid x-api-key"),
    402: ErrorKind(
        "billing_error",
        "Your credit balance is too low to access the Anthropic API. "
        "Please go to Plans & Billing to upgrade or purchase credits.",
    ),
    403: ErrorKind(
        "permission_error", "Your API key does not have permission to use the specified resource."
    ),
    404: ErrorKind("not_found_error", "The requested resource could not be found."),
    408: ErrorKind("timeout_error", "Request timed out."),
    409: ErrorKind("conflict_error", "The request conflicts with the current state of the resource."),
    413: ErrorKind("request_too_large", "Request exceeds the maximum allowed number of bytes."),
    429: ErrorKind(
        "rate_limit_error",
        "This request would exceed the rate limit for your organization of 50 requests per minute. "
        "For details, refer to: https://docs.claude.com/en/api/rate-limits. You can see the response "
        "headers for current usage. Please reduce the prompt length or the maximum tokens requested, "
        "or try again later. You may also contact sales at https://www.anthropic.com/contact-sales "
        "to discuss your options for a rate limit increase.",
    ),
    500: ErrorKind("api_error", "Internal server error"),
    502: ErrorKind("api_error", "Bad gateway"),
    503: ErrorKind("api_error", "Service unavailable"),
    504: ErrorKind("timeout_error", "Request timed out"),
    529: ErrorKind("overloaded_error", "Overloaded"),
}


def is_retryable(status: int) -> bool:
    """Statuses the SDKs retry (408, 409, 429, 5xx); ``retry-after-ms`` goes on these when configured."""
    return status in (408, 409, 429) or status >= 500


def error_kind(status: int) -> ErrorKind:
    """The real error type/message for ``status`` (``api_error`` for an unlisted 5xx)."""
    kind = ERROR_KINDS.get(status)
    if kind is not None:
        return kind
    if status >= 500:
        return ErrorKind("api_error", "Internal server error")
    return ErrorKind(
        "invalid_request_error", "There was an issue with the format or content of your request."
    )


class ApiError(Exception):
    """An error response: raised anywhere in request handling, rendered by the wire layer."""

    def __init__(
        self,
        status: int,
        message: str | None = None,
        *,
        error_type: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        kind = error_kind(status)
        self.status = status
        self.error_type = error_type or kind.type
        self.message = message if message is not None else kind.message
        self.headers: dict[str, str] = dict(headers or {})
        super().__init__(f"{status} {self.error_type}: {self.message}")

    def error_object(self) -> JSONObject:
        """The inner ``{"type":..,"message":..}`` object (also the payload of an SSE ``error``)."""
        return {"type": self.error_type, "message": self.message}

    def body(self, request_id: str) -> JSONObject:
        """The first-party error envelope."""
        return {"type": "error", "error": self.error_object(), "request_id": request_id}


def invalid_request(message: str) -> ApiError:
    """A 400 ``invalid_request_error``."""
    return ApiError(400, message)
