"""The body's minimum rate counts the body's bytes, not the chunked framing around them.

Observed before: the rate counted every byte received, so a chunked body whose chunk-size lines
carried long extensions (``1;eeee...``: 2 KB of framing per byte of body, or one chunk-size line
that never ends) earned a second of grace per 1,024 bytes of framing. 3.7 GB of extension sent in
8 s on loopback (no body byte at all) bought 42 days: the connection then sat idle, never timed out.
"""

from __future__ import annotations

import socket
import time

import pytest

from tests.support.gateway_stack import CLIENT_KEY, StackFactory
from tests.support.raw_http import read_response, request_bytes

HEAD = [("x-api-key", CLIENT_KEY), ("content-type", "application/json"), ("transfer-encoding", "chunked")]
FRAMING = 400_000  # bytes of chunk extensions: 390 s of grace if they counted


@pytest.mark.parametrize(
    "framing",
    [
        b"".join(b"1;" + b"e" * 2000 + b"\r\n \r\n" for _ in range(FRAMING // 2000)),  # one byte a chunk
        b"1;" + b"e" * FRAMING,  # one chunk-size line that never ends
    ],
    ids=["long extensions", "endless chunk-size line"],
)
def test_chunk_extensions_earn_no_time(make_stack: StackFactory, framing: bytes) -> None:
    stack = make_stack(GATEWAY_BODY_TIMEOUT_S="1")
    with socket.create_connection(("127.0.0.1", stack.port), timeout=10) as client:
        client.sendall(request_bytes("POST", "/v1/messages", HEAD, content_length=False))
        started = time.monotonic()
        client.sendall(framing)
        answer = read_response(client.makefile("rb"))
        waited = time.monotonic() - started
    assert answer.status == 408
    assert answer.json()["error"]["type"] == "timeout_error"
    assert waited < 4.0  # the 1 s grace, and the 200 bytes of body at most: 0.2 s more
    assert stack.upstream_count == 0


def test_a_steady_body_at_the_minimum_rate_is_read(make_stack: StackFactory) -> None:
    """Counting the body's own bytes: one 600-byte chunk every 0.5 s (1,200 B/s) keeps going."""
    stack = make_stack(GATEWAY_BODY_TIMEOUT_S="1")
    body = b'{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":"' + b"a" * 3000
    body += b'"}]}'
    with socket.create_connection(("127.0.0.1", stack.port), timeout=10) as client:
        client.sendall(request_bytes("POST", "/v1/messages", HEAD, content_length=False))
        for start in range(0, len(body), 600):
            piece = body[start : start + 600]
            client.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
            time.sleep(0.5)
        client.sendall(b"0\r\n\r\n")
        answer = read_response(client.makefile("rb"))
    assert answer.status == 200, answer.body[:300]
