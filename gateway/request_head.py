"""What the connection handler amends in a parsed request head before aiohttp routes it.

* ``Expect``: aiohttp answers it before any route or middleware runs, ``100 Continue`` whatever the
  body's size and a ``text/plain`` ``417`` quoting the header for anything but ``100-continue``.
  The field is dropped unless the gateway will read the body, so a body announced over
  ``GATEWAY_MAX_BODY_BYTES`` is refused ``413`` at once, and other expectations are ignored.
* ``Transfer-Encoding`` on HTTP/1.0: the framing is faulty (RFC 9112, 6.1), so the connection
  closes after the answer whatever ``Connection`` says.

Details: docs/internals/gateway.md
"""

from __future__ import annotations

from aiohttp.http import HttpVersion10, HttpVersion11, RawRequestMessage
from multidict import CIMultiDict, CIMultiDictProxy


def amend(message: RawRequestMessage, max_body_bytes: int) -> RawRequestMessage:
    """``message`` as the gateway serves it (the same object when nothing changes)."""
    headers = message.headers
    if "expect" in headers and not expectation_met(message, max_body_bytes):
        message = without_expectation(message)
    if message.version == HttpVersion10 and not message.should_close and "transfer-encoding" in headers:
        message = message._replace(should_close=True)
    return message


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
