"""Malformed HTTP, answered in the Anthropic error shape without echoing a byte of it.

aiohttp's parser raises ``HttpProcessingError`` subclasses whose messages quote the offending line
(a header line may hold a client's key). :func:`classify` maps one to a status, a bounded ``kind``
(the metric label) and a fixed message; the exception's text is only inspected, never returned
or logged. :func:`raw_response` is the whole HTTP/1.1 answer the connection layer writes itself
when there is no request object to answer through (a header timeout, a shed connection).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Final

from aiohttp import http_exceptions as hx

from gateway.errors import error_body, error_type_for_status

_TOO_MANY_HEADERS: Final = "too many headers received"
_TLS_ON_PLAIN: Final = "received https traffic on an http port"


@dataclass(frozen=True, slots=True)
class ParseFailure:
    """How a malformed request is answered: ``message`` is ours, never the client's bytes."""

    status: int
    kind: str
    message: str

    @property
    def error_type(self) -> str:
        return error_type_for_status(self.status)

    def body(self) -> bytes:
        return error_body(self.error_type, self.message)


def _limit(exc: hx.LineTooLong) -> str:
    """The configured limit the line exceeded (an int we set), as text; nothing else from ``exc``."""
    limit = exc.args[1] if len(exc.args) > 1 else None
    return f" (limit {limit} bytes)" if isinstance(limit, int) else ""


def _head(exc: hx.HttpProcessingError) -> str:
    """The parser's own description: llhttp's reason comes before the ``:\\n`` that starts the quote."""
    return str(exc.message).split(":\n", 1)[0].lower()


def classify(exc: BaseException | None, *, request_line_complete: bool) -> ParseFailure:
    """The answer to a parser error; ``request_line_complete``: the request line had ended (so a
    line that is too long is a header field, ``431``, not the request line, ``414``)."""
    if isinstance(exc, hx.LineTooLong):
        if request_line_complete:
            return ParseFailure(431, "header_too_large", "a request header field is too large" + _limit(exc))
        return ParseFailure(414, "request_line_too_long", "the request line is too long" + _limit(exc))
    if not isinstance(exc, hx.HttpProcessingError):
        return ParseFailure(400, "other", "malformed HTTP request")
    head = _head(exc)
    if isinstance(exc, hx.BadHttpMethod):
        if head == _TLS_ON_PLAIN:
            return ParseFailure(
                400, "tls_on_plain_http", "this port speaks plain HTTP: the request looks like TLS (use http://)"
            )
        return ParseFailure(400, "method", "malformed HTTP request: invalid method")
    if head == _TOO_MANY_HEADERS:
        return ParseFailure(431, "too_many_headers", "too many request header fields")
    if isinstance(exc, hx.TransferEncodingError) or "chunk" in head:
        return ParseFailure(400, "chunked", "malformed request body: invalid chunked transfer encoding")
    if isinstance(exc, hx.ContentLengthError) or "content-length" in head or "transfer-encoding" in head:
        return ParseFailure(400, "framing", "malformed request: invalid Content-Length or Transfer-Encoding")
    if isinstance(exc, hx.ContentEncodingError | hx.PayloadEncodingError):
        return ParseFailure(400, "body", "malformed request body")
    if isinstance(exc, hx.InvalidHeader) or "header" in head:
        return ParseFailure(400, "header", "malformed HTTP request: invalid header")
    if isinstance(exc, hx.BadStatusLine | hx.InvalidURLError) or any(
        word in head for word in ("version", "url", "status line", "method", "expected http", "request line")
    ):
        return ParseFailure(400, "request_line", "malformed HTTP request line")
    return ParseFailure(400, "other", "malformed HTTP request")


def raw_response(status: int, error_type: str, message: str, headers: Mapping[str, str] | None = None) -> bytes:
    """A complete ``Connection: close`` HTTP/1.1 response with an Anthropic-shaped JSON body."""
    body = error_body(error_type, message)
    try:
        reason = HTTPStatus(status).phrase
    except ValueError:
        reason = "Error"
    lines = [
        f"HTTP/1.1 {status} {reason}",
        "content-type: application/json",
        f"content-length: {len(body)}",
        "connection: close",
        *(f"{name}: {value}" for name, value in (headers or {}).items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("ascii") + body
