"""``Expect`` on a request: ``100 Continue`` only for a body the gateway will read.

aiohttp answers ``Expect`` before any route or middleware runs: ``100 Continue`` for a body over
``GATEWAY_MAX_BODY_BYTES`` (invited, then refused ``413``), and a ``text/plain`` ``417`` quoting
the header for any other expectation. The connection handler drops the header from such a request
before aiohttp sees it, so the route answers a too-large body at once without reading it, and an
expectation other than ``100-continue`` is ignored, as RFC 9110 (10.1.1) allows.

Details: docs/internals/gateway.md
"""

from __future__ import annotations

from aiohttp.http import HttpVersion11, RawRequestMessage
from multidict import CIMultiDict, CIMultiDictProxy


def expectation_met(message: RawRequestMessage, max_body_bytes: int) -> bool:
    """Whether aiohttp may answer the request's ``Expect`` itself: ``100-continue`` on HTTP/1.1 for
    a body of unknown length (chunked) or of at most ``max_body_bytes``."""
    if message.headers.get("expect", "").strip().lower() != "100-continue" or message.version != HttpVersion11:
        return False
    length = message.headers.get("content-length")
    return length is None or (length.isdigit() and int(length) <= max_body_bytes)


def without_expectation(message: RawRequestMessage) -> RawRequestMessage:
    """``message`` without its ``Expect`` header field(s)."""
    headers = CIMultiDict((k, v) for k, v in message.headers.items() if k.lower() != "expect")
    raw = tuple((k, v) for k, v in message.raw_headers if k.lower() != b"expect")
    return message._replace(headers=CIMultiDictProxy(headers), raw_headers=raw)
