"""Reading a whole (non-streaming) upstream answer within bounds.

The gateway holds such an answer in memory (to read its usage, to translate it), so it reads at
most ``GATEWAY_MAX_UPSTREAM_BODY_BYTES`` of it, counted after decoding: a longer one, declared or
not, compressed or not, is refused without reading further. An answer that ends before its
framing says it does (the connection closed mid-body) is the upstream's failure too. Both become
an Anthropic-shaped ``502 api_error`` (:func:`read_answer`); error answers are read up to
``ERROR_BODY_LIMIT`` (:func:`read_error_body`). Streams are relayed as they come
(``gateway.relay``), never read whole.
"""

from __future__ import annotations

import logging

import aiohttp

from gateway.errors import UpstreamUnavailable
from gateway.providers.base import UpstreamResponse
from gateway.streaming.guard import UPSTREAM_BROKEN

ERROR_BODY_LIMIT = 1024 * 1024
"""An upstream's error answer is read up to this many bytes (its JSON is a few hundred; a proxy's
page a few thousand)."""


class UpstreamBodyTooLarge(aiohttp.ClientPayloadError):
    """An upstream answer longer than the gateway reads: a broken answer to everything that handles
    one (``aiohttp.ClientError``), with its own message."""


async def read_bounded(response: aiohttp.ClientResponse, limit: int) -> bytes:
    """The whole body of ``response`` (decoded), or :class:`UpstreamBodyTooLarge` once it passes
    ``limit`` bytes: nothing more is read and the connection is closed (not reused). A body cut off
    before its end raises as ``response.read()`` does (``aiohttp.ClientPayloadError``)."""
    length = response.content_length
    if length is not None and "content-encoding" not in response.headers:
        if length > limit:  # said up front: not one byte of it is read
            response.close()
            raise UpstreamBodyTooLarge(f"the upstream's answer ({length} bytes) exceeds {limit} bytes")
        return await response.read()  # exactly ``length`` bytes: aiohttp's own read
    parts: list[bytes] = []
    total = 0
    content = response.content
    while chunk := await content.readany():
        total += len(chunk)
        if total > limit:
            response.close()
            raise UpstreamBodyTooLarge(f"the upstream's answer exceeds {limit} bytes")
        parts.append(chunk)
    return b"".join(parts)


async def read_answer(upstream: UpstreamResponse) -> bytes:
    """The whole body of a non-streaming answer. One cut off before its end, or longer than the
    gateway reads (``GATEWAY_MAX_UPSTREAM_BODY_BYTES``), is the upstream's failure: a 502
    ``api_error`` (``x-should-retry: true`` for the cut, ``false`` for the size)."""
    try:
        return await upstream.read()
    except UpstreamBodyTooLarge as exc:
        raise UpstreamUnavailable(str(exc), retryable=False).advising(retry=False) from None
    except UPSTREAM_BROKEN as exc:
        message = f"the upstream's answer was cut off before its end ({type(exc).__name__})"
        raise UpstreamUnavailable(message).advising(retry=True) from None


async def read_error_body(response: aiohttp.ClientResponse, provider: str, request_id: str) -> bytes:
    """The body of a non-2xx upstream answer, or ``b""`` when the connection drops while reading it.

    The status line is the upstream's answer: a 401 whose body was cut stays a 401 (mapped by its
    status), never a retryable "upstream unreachable" that would mask it (and, for a one-off
    error, turn into a success on the retry). The response is released either way.
    """
    try:
        return await read_bounded(response, ERROR_BODY_LIMIT)
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
