"""The first party's error answers (4xx/5xx), as a client may see them.

An error in Anthropic's envelope (``{"type": "error", "error": {"type": ..., "message": ...}}``) is
relayed as it came (clients' recovery logic matches its wording), except for credentials an
upstream echoes (:mod:`gateway.echoed_secrets`). Anything else — a CDN's or a proxy's HTML page, an
empty body, JSON of another shape — is not an API error: the client gets an Anthropic error of
ours with the same status, typed by it, naming what came back (and, on a plain-http upstream
reached through the egress proxy, that the proxy may have answered); the original is logged, an
excerpt, redacted. A body cut off, too long or stalled keeps its status too. A 401 refused the
gateway's own credential (the client's never goes upstream): it says so, with ``x-should-retry:
false``, so a client neither blames its own key nor retries for minutes.
"""

from __future__ import annotations

import logging
from typing import Final

import aiohttp
import orjson

from gateway.echoed_secrets import redact, redact_bytes
from gateway.errors import error_body, error_type_for_status
from gateway.headers import relayable_response_headers
from gateway.providers.base import BufferedResponse
from gateway.streaming.guard import UPSTREAM_BROKEN
from gateway.upstream_body import BodyLimits, read_bounded, unreadable

log = logging.getLogger("switchyard.upstream_errors")

_EXCERPT: Final = 200
_REPLACED: Final = frozenset({"content-type", "content-length", "content-encoding"})


def is_api_error(body: bytes) -> bool:
    """Whether ``body`` is an error in Anthropic's envelope (an ``error`` object with a ``type``)."""
    try:
        decoded = orjson.loads(body)
    except orjson.JSONDecodeError:
        return False
    error = decoded.get("error") if isinstance(decoded, dict) else None
    return isinstance(error, dict) and isinstance(error.get("type"), str)


def _what(content_type: str, body: bytes) -> str:
    if not body.strip():
        return "an empty body"
    if content_type == "text/html":
        return "an HTML page"
    return f"a body ({content_type or 'untyped'}) that is not an API error"


async def first_party_error(
    response: aiohttp.ClientResponse, limits: BodyLimits, request_id: str, via_proxy: str | None
) -> BufferedResponse:
    """The answer for the first party's error ``response`` (status >= 400), read within
    ``limits.for_errors()``. ``via_proxy``: the egress proxy (``host:port``) that forwarded a
    plain-http request, whose own refusals would look like the upstream's."""
    status = response.status
    headers = relayable_response_headers(response.headers.items())
    content_type = response.content_type if "content-type" in response.headers else ""
    try:
        body = await read_bounded(response, limits.for_errors())
    except UPSTREAM_BROKEN as exc:  # the status line said what failed; the body is ours
        message = f"the upstream answered {status}; {unreadable(exc).message}"
        return _ours(status, message, headers)
    finally:
        response.release()
    if is_api_error(body):
        if status == 401:
            return _credential_refused(body, headers, request_id)
        return BufferedResponse(status, redact_bytes(body), headers)
    what = _what(content_type, body)
    excerpt = " ".join(redact(body[: _EXCERPT * 4].decode("utf-8", "replace")).split())[:_EXCERPT]
    log.warning(
        "upstream answered %d with %s (%d bytes, request %s): %s", status, what, len(body), request_id, excerpt
    )
    message = f"the upstream answered {status} with {what}"
    if via_proxy is not None:
        message += f" (the request went through the egress proxy {via_proxy}, which may have answered)"
    return _ours(status, message, headers)


def _credential_refused(body: bytes, headers: list[tuple[str, str]], request_id: str) -> BufferedResponse:
    """The upstream's 401 (an API error) as the client gets it: its type and request id kept, a
    message naming the gateway's credential (the upstream's, logged, would read as the client's
    key: Claude Code answers any message naming ``x-api-key`` with "Fix external API key"), and
    not to be retried (a retry sends the same credential)."""
    decoded = orjson.loads(body)
    error = decoded["error"]
    log.warning(
        "the upstream refused the gateway's credential (401 %s, request %s): %s",
        error["type"], request_id, redact(str(error.get("message")))[:_EXCERPT],
    )  # fmt: skip
    message = "The gateway's upstream credential was rejected (the client's key was accepted)."
    upstream_id = decoded.get("request_id")
    kept = [(n, v) for n, v in headers if n.lower() not in _REPLACED and n.lower() != "x-should-retry"]
    kept += [("content-type", "application/json"), ("x-should-retry", "false")]
    answer = error_body(str(error["type"]), message, upstream_id if isinstance(upstream_id, str) else None)
    return BufferedResponse(401, answer, kept)


def _ours(status: int, message: str, headers: list[tuple[str, str]]) -> BufferedResponse:
    kept = [(name, value) for name, value in headers if name.lower() not in _REPLACED]
    kept.append(("content-type", "application/json"))
    return BufferedResponse(status, error_body(error_type_for_status(status), message), kept)
