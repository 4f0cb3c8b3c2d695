"""A client that goes away before its whole body arrived: one access line, no traceback.

Observed: ``ConnectionResetError`` from reading the body reached the error middleware's last
resort (an ERROR line with a traceback, a 500 in the access log).
"""

from __future__ import annotations

import logging
import socket

import pytest

from tests.support.gateway_stack import CLIENT_KEY, StackFactory
from tests.support.log_lines import LogLines
from tests.support.raw_http import read_response, request_bytes
from tests.support.waiting import wait_until

HEAD = [("x-api-key", CLIENT_KEY), ("content-type", "application/json")]


@pytest.mark.parametrize(
    "request_start",
    [
        request_bytes("POST", "/v1/messages", [*HEAD, ("content-length", "500")]) + b'{"model":"claude',
        request_bytes("POST", "/v1/messages", [*HEAD, ("transfer-encoding", "chunked")]) + b'40\r\n{"model"',
        request_bytes(
            "POST", "/v1/messages", [*HEAD, ("content-length", "500"), ("content-encoding", "gzip")]
        )
        + b"\x1f\x8b\x08\x00",
    ],
    ids=["content-length", "chunked", "gzip"],
)
def test_a_body_cut_short_by_the_client(
    make_stack: StackFactory, log_lines: LogLines, caplog: pytest.LogCaptureFixture, request_start: bytes
) -> None:
    stack = make_stack()
    with socket.create_connection(("127.0.0.1", stack.port), timeout=5) as client:
        client.sendall(request_start)
        wait_until(lambda: stack.gateway.open_connections == 1)
    (line,) = wait_until(lambda: log_lines.access())
    # no answer existed when the client left: 499 "client closed request" (gateway.accounting)
    assert (line["status"], line["client_disconnected"]) == (499, True)
    assert line["failure"] == "client disconnected before its request was read"
    assert stack.upstream_count == 0
    assert "Traceback" not in log_lines.text() + caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize("coding", [None, "gzip"])
def test_a_body_refused_before_it_was_read_closes_its_connection(
    make_stack: StackFactory, log_lines: LogLines, coding: str | None
) -> None:
    """Observed before: the 413 for a body announced over ``GATEWAY_MAX_BODY_BYTES`` kept the
    connection alive, so a keep-alive client sent its next request into the unread body, and the
    connection closed under it without an answer."""
    stack = make_stack(GATEWAY_MAX_BODY_BYTES="1000")
    headers = [*HEAD, ("content-length", "5000")] + ([("content-encoding", coding)] if coding else [])
    with socket.create_connection(("127.0.0.1", stack.port), timeout=5) as client:
        client.sendall(request_bytes("POST", "/v1/messages", headers))
        answer = read_response(client.makefile("rb"))
    assert answer.status == 413
    assert answer.header("connection") == "close"
    (line,) = wait_until(lambda: log_lines.access())
    assert line["status"] == 413
