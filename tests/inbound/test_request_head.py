"""What the gateway amends in a request head before routing it (``gateway.request_head``).

``Expect``: ``100 Continue`` only for a body the gateway will read, never a 417. Observed before
(aiohttp answers ``Expect`` before any route or middleware runs): ``Expect: 100-continue`` with
``Content-Length: 99999999`` (over ``GATEWAY_MAX_BODY_BYTES``) got ``100 Continue``, inviting the
upload the ``413`` then refused; ``Expect: foo`` got a ``text/plain`` 417 ``Unknown Expect: foo``
(the header quoted, no access line).

``Transfer-Encoding`` on HTTP/1.0: observed before, ``Connection: keep-alive`` kept the connection
open after the answer, where RFC 9112 (6.1) requires closing it (the framing is faulty: a proxy
that ignores the field would see the chunked body as the next request).
"""

from __future__ import annotations

import socket

import orjson
import pytest

from tests.support.error_shape import assert_error
from tests.support.gateway_stack import CLIENT_KEY, StackFactory
from tests.support.log_lines import LogLines
from tests.support.raw_http import read_response, request_bytes
from tests.support.waiting import wait_until

HI = orjson.dumps({"model": "claude-sonnet-4-5", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]})
HEAD = [("x-api-key", CLIENT_KEY), ("content-type", "application/json")]


def first_answer(port: int, request: bytes) -> tuple[socket.socket, bytes]:
    """The connection and the first status line it gets for ``request`` (headers only)."""
    client = socket.create_connection(("127.0.0.1", port), timeout=5)
    client.sendall(request)
    received = b""
    while b"\r\n\r\n" not in received:
        chunk = client.recv(4096)
        assert chunk, received
        received += chunk
    return client, received.partition(b"\r\n")[0]


def test_an_announced_body_over_the_limit_is_refused_without_100_continue(
    make_stack: StackFactory, log_lines: LogLines
) -> None:
    stack = make_stack(GATEWAY_MAX_BODY_BYTES="1000")
    headers = [*HEAD, ("expect", "100-continue"), ("content-length", "1001")]
    client, status = first_answer(stack.port, request_bytes("POST", "/v1/messages", headers))
    with client:
        assert status == b"HTTP/1.1 413 Request Entity Too Large"
    (line,) = wait_until(lambda: log_lines.access())
    assert line["status"] == 413
    assert stack.upstream_count == 0


@pytest.mark.parametrize("length", ["1000", None])  # at the limit; chunked (length unknown)
def test_a_body_the_gateway_will_read_gets_100_continue(make_stack: StackFactory, length: str | None) -> None:
    stack = make_stack(GATEWAY_MAX_BODY_BYTES="1000")
    framing = ("content-length", str(len(HI))) if length else ("transfer-encoding", "chunked")
    head = request_bytes("POST", "/v1/messages", [*HEAD, ("Expect", "100-Continue"), framing])
    client, status = first_answer(stack.port, head)
    with client:
        assert status == b"HTTP/1.1 100 Continue"
        client.sendall(HI if length else b"%x\r\n%s\r\n0\r\n\r\n" % (len(HI), HI))
        assert read_response(client.makefile("rb")).status == 200


@pytest.mark.parametrize("expect", ["foo", "100-continue, foo", "101-upgrade"])
def test_an_unknown_expectation_is_ignored(make_stack: StackFactory, log_lines: LogLines, expect: str) -> None:
    stack = make_stack()
    with socket.create_connection(("127.0.0.1", stack.port), timeout=5) as client:
        client.sendall(request_bytes("POST", "/v1/messages", [*HEAD, ("expect", expect)], HI))
        answer = read_response(client.makefile("rb"))
        assert answer.status == 200, answer.body[:200]
        client.sendall(request_bytes("POST", "/nope", [("expect", expect)], HI))
        assert_error(read_response(client.makefile("rb")), 404, "not_found_error")
    (line,) = wait_until(lambda: log_lines.access())
    assert line["status"] == 200


def test_transfer_encoding_on_http_1_0_closes_the_connection(make_stack: StackFactory) -> None:
    stack = make_stack()
    head = b"POST /v1/messages HTTP/1.0\r\nHost: gw\r\nConnection: keep-alive\r\nx-api-key: " + CLIENT_KEY.encode()
    head += b"\r\ncontent-type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    with socket.create_connection(("127.0.0.1", stack.port), timeout=5) as client:
        client.sendall(head + b"%x\r\n%s\r\n0\r\n\r\n" % (len(HI), HI))
        stream = client.makefile("rb")
        answer = read_response(stream)
        assert answer.status == 200, answer.body[:200]
        assert answer.header("connection") != "keep-alive"
        assert stream.read() == b""  # closed by the gateway


def test_every_request_of_a_pipelined_chunk_is_amended(make_stack: StackFactory) -> None:
    """Two requests in one segment are parsed together: the first is amended too, not only the last
    (it closes the connection after its answer, the second is never served)."""
    stack = make_stack()
    head = b"POST /v1/messages HTTP/1.0\r\nHost: gw\r\nConnection: keep-alive\r\nx-api-key: " + CLIENT_KEY.encode()
    head += b"\r\ncontent-type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    second = request_bytes("POST", "/v1/messages", HEAD, HI)
    with socket.create_connection(("127.0.0.1", stack.port), timeout=5) as client:
        client.sendall(head + b"%x\r\n%s\r\n0\r\n\r\n" % (len(HI), HI) + second)
        stream = client.makefile("rb")
        assert read_response(stream).status == 200
        assert stream.read() == b""  # closed after the first answer: the second was not served
    assert stack.upstream_count == 1


def test_an_unknown_expectation_is_ignored_on_a_pipelined_request(make_stack: StackFactory) -> None:
    stack = make_stack()
    first = request_bytes("POST", "/v1/messages", [*HEAD, ("expect", "foo")], HI)
    with socket.create_connection(("127.0.0.1", stack.port), timeout=5) as client:
        client.sendall(first + request_bytes("POST", "/v1/messages", HEAD, HI))
        stream = client.makefile("rb")
        assert read_response(stream).status == 200
        assert read_response(stream).status == 200
