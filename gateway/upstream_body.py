"""Reading a whole (non-streaming) upstream answer within bounds.

The gateway holds such an answer in memory (to read its usage, to translate it), so it reads at
most ``GATEWAY_MAX_UPSTREAM_BODY_BYTES`` of it, counted after decoding: a longer one, declared or
not, compressed or not, is refused without reading further. An answer that ends before its
framing says it does (the connection closed mid-body) is the upstream's failure too. Both become
an Anthropic-shaped ``502 api_error`` (:func:`read_answer`). An upstream silent for
``GATEWAY_UPSTREAM_READ_TIMEOUT_S`` while it sends such an answer is a ``504 timeout_error``.
Error answers are read up to ``ERROR_BODY_LIMIT`` (:func:`read_error_body`). Streams are relayed as
they come (``gateway.relay``, under its idle watchdog), never read whole.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, replace

import aiohttp

from gateway.errors import (
    GatewayError,
    UpstreamTimeout,
    UpstreamUnavailable,
    error_body,
    error_type_for_status,
)
from gateway.providers.base import UpstreamResponse
from gateway.streaming.guard import UPSTREAM_BROKEN

ERROR_BODY_LIMIT = 1024 * 1024
"""An upstream's error answer is read up to this many bytes (its JSON is a few hundred; a proxy's
page a few thousand)."""


@dataclass(frozen=True, slots=True)
class BodyLimits:
    """How much of a whole answer is read, and how long the upstream may pause while sending it."""

    max_bytes: int = 32 * 1024 * 1024  # GATEWAY_MAX_UPSTREAM_BODY_BYTES
    read_timeout_s: float = 60.0  # GATEWAY_UPSTREAM_READ_TIMEOUT_S

    def for_errors(self) -> BodyLimits:
        return replace(self, max_bytes=min(self.max_bytes, ERROR_BODY_LIMIT))


DEFAULT_BODY_LIMITS = BodyLimits()


class UpstreamBodyTooLarge(aiohttp.ClientPayloadError):
    """An upstream answer longer than the gateway reads: a broken answer to everything that handles
    one (``aiohttp.ClientError``), with its own message."""


async def read_bounded(response: aiohttp.ClientResponse, limits: BodyLimits) -> bytes:
    """The whole body of ``response`` (decoded), or :class:`UpstreamBodyTooLarge` once it passes
    ``limits.max_bytes``: nothing more is read and the connection is closed (not reused).
    ``TimeoutError`` when no byte came for ``limits.read_timeout_s``; a body cut off before its end
    raises as ``response.read()`` does (``aiohttp.ClientPayloadError``)."""
    limit = limits.max_bytes
    length = response.content_length
    plain = "content-encoding" not in response.headers
    if plain and length is not None and length > limit:  # said up front: not one byte of it is read
        response.close()
        raise UpstreamBodyTooLarge(f"the upstream's answer ({length} bytes) exceeds {limit} bytes")
    content = response.content
    if plain and length is not None and content.is_eof():  # all of it is here: nothing to wait for
        return await response.read()
    parts: list[bytes] = []
    total = 0
    while True:
        async with asyncio.timeout(limits.read_timeout_s):
            chunk = await content.readany()
        if not chunk:
            return b"".join(parts)
        total += len(chunk)
        if total > limit:
            response.close()
            raise UpstreamBodyTooLarge(f"the upstream's answer exceeds {limit} bytes")
        parts.append(chunk)


async def read_answer(upstream: UpstreamResponse) -> bytes:
    """The whole body of a non-streaming answer. One cut off before its end, or longer than the
    gateway reads (``GATEWAY_MAX_UPSTREAM_BODY_BYTES``), is the upstream's failure: a 502
    ``api_error`` (``x-should-retry: true`` for the cut, ``false`` for the size); silence is a 504.
    An error answer (4xx/5xx) keeps its status though: its unreadable body is replaced by an
    Anthropic error body of ours, typed by the status."""
    try:
        return await upstream.read()
    except UPSTREAM_BROKEN as exc:  # (TimeoutError and UpstreamBodyTooLarge among them)
        failure = unreadable(exc)
    if upstream.status >= 400:
        message = f"the upstream answered {upstream.status}; {failure.message}"
        return error_body(error_type_for_status(upstream.status), message)
    raise failure


def unreadable(exc: BaseException) -> GatewayError:
    """The gateway's error for an answer whose body could not be read (``read_answer``)."""
    if isinstance(exc, TimeoutError):
        return UpstreamTimeout("the upstream went silent while sending its answer").advising(retry=True)
    if isinstance(exc, UpstreamBodyTooLarge):
        return UpstreamUnavailable(str(exc), retryable=False).advising(retry=False)
    message = f"the upstream's answer was cut off before its end ({type(exc).__name__})"
    return UpstreamUnavailable(message).advising(retry=True)


async def read_error_body(
    response: aiohttp.ClientResponse, limits: BodyLimits, provider: str, request_id: str
) -> bytes:
    """The body of a non-2xx upstream answer, or ``b""`` when the connection drops while reading it.

    The status line is the upstream's answer: a 401 whose body was cut, too long or stalled
    (``limits.for_errors()``) stays a 401 (mapped by its status), never a retryable "upstream unreachable" that would mask it (and, for a one-off
    error, turn into a success on the retry). The response is released either way.
    """
    try:
        return await read_bounded(response, limits.for_errors())
    except (aiohttp.ClientError, OSError) as exc:
        logging.getLogger("switchyard.transport").warning(
            "%s error body lost (status %d, request %s): %s",
            provider,
            response.status,
            request_id,
            type(exc).__name__,
        )
        return b""
    finally:
        response.release()
