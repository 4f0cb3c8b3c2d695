"""Deeply nested JSON bodies (issue 13, items 1 and 7).

Observed before: bodies nested ~255-490 deep got a plain 500 with a 145 KB traceback per 1.1 KB
request (the cache step's prefix hashing: orjson writes at most 254 levels, then a recursive
fallback), tool_result blocks nested from ~200 levels too; with ``GATEWAY_LOG_BODIES=1`` the
access log broke (13 of 16 such requests left no line, a 500 after the upstream was billed). Now a
body nesting more than ``GATEWAY_MAX_JSON_DEPTH`` (default 128) levels is a 400 before anything
recursive sees it, and every step after that is safe up to the largest allowed limit (200).
"""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from tests.support.error_shape import assert_error
from tests.support.gateway_stack import CLIENT_KEY, Connect, StackFactory
from tests.support.log_lines import LogLines
from tests.support.raw_http import RawConnection, RawResponse, request_bytes
from tests.support.waiting import wait_until

SESSION = "0b7e4f4e-5a56-4b8a-9a43-4f1c9d7f2b11"
# body(1) > messages(2) > message(3) > content(4) > tool_use block(5) > input(6) > ...
TOOL_INPUT_DEPTH = 6


def tool_input_body(depth: int, *, stream: bool = False) -> bytes:
    """A valid Messages body whose tool_use ``input`` makes the whole body ``depth`` levels deep."""
    extra = depth - TOOL_INPUT_DEPTH
    nested = b'{"a":' * extra + b"{}" + b"}" * extra
    return (
        b'{"model":"claude-sonnet-4-5","max_tokens":16,"stream":'
        + (b"true" if stream else b"false")
        + b',"tools":[{"name":"t","input_schema":{"type":"object"}}],"messages":['
        b'{"role":"user","content":"call t"},'
        b'{"role":"assistant","content":[{"type":"tool_use","id":"toolu_01","name":"t","input":'
        + nested
        + b'}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_01","content":"ok",'
        b'"cache_control":{"type":"ephemeral"}}]}]}'
    )


def nested_tool_results(levels: int) -> bytes:
    """The issue's shape: tool_result blocks nested in each other's content, markers at every level."""
    head = b'{"type":"tool_result","tool_use_id":"toolu_01","cache_control":{"type":"ephemeral"},"content":['
    inner = head * levels + b'{"type":"text","text":"x"}' + b"]}" * levels
    return (
        b'{"model":"claude-sonnet-4-5","max_tokens":16,"system":[{"type":"text","text":"s",'
        b'"cache_control":{"type":"ephemeral","ttl":"1h"}}],"messages":[{"role":"user","content":['
        + inner
        + b"]}]}"
    )


def bracket_body(depth: int) -> bytes:
    """Arrays nested ``depth`` deep in ``metadata`` (the issue's 490 / 1,023 / 5,000 probes)."""
    return (
        b'{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[],"metadata":'
        + b"[" * depth
        + b"]" * depth
        + b"}"
    )


def post(connection: RawConnection, body: bytes, path: str = "/v1/messages") -> RawResponse:
    headers = [
        ("x-api-key", CLIENT_KEY),
        ("content-type", "application/json"),
        ("x-claude-code-session-id", SESSION),
    ]
    return connection.send(request_bytes("POST", path, headers, body))


def depth_of(body: bytes) -> int:
    deepest = level = 0
    for token in orjson.dumps(orjson.loads(body), option=orjson.OPT_INDENT_2).splitlines():
        stripped = token.lstrip(b" ")
        level = (len(token) - len(stripped)) // 2 + 1
        if stripped.endswith((b"{", b"[", b"{}", b"[]")):
            deepest = max(deepest, level)
    return deepest


def assert_no_traceback(log_lines: LogLines, caplog: pytest.LogCaptureFixture) -> None:
    assert "Traceback" not in log_lines.text()
    assert "Traceback" not in caplog.text
    loud = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not loud, [r.getMessage()[:200] for r in loud]


def test_the_bodies_measure_what_they_say() -> None:
    assert depth_of(tool_input_body(128)) == 128
    assert depth_of(tool_input_body(129)) == 129
    assert depth_of(nested_tool_results(10)) == 4 + 2 * 10 + 1


@pytest.mark.parametrize("stream", [False, True])
def test_depth_at_the_limit_is_served_and_one_more_is_refused(
    make_stack: StackFactory,
    connect: Connect,
    log_lines: LogLines,
    caplog: pytest.LogCaptureFixture,
    stream: bool,
) -> None:
    stack = make_stack(GATEWAY_LOG_BODIES="1", GATEWAY_MAX_RETRIES="0")
    connection = connect(stack)
    served = post(connection, tool_input_body(128, stream=stream))
    assert served.status == 200, served.body[:300]
    assert stack.upstream_count == 1
    refused = post(connection, tool_input_body(129, stream=stream))
    error = assert_error(refused, 400, "invalid_request_error")
    assert "128 levels" in error["message"]
    assert stack.upstream_count == 1  # refused before the upstream
    lines = wait_until(lambda: len(log_lines.access()) == 2 and log_lines.access())
    assert [line["status"] for line in lines] == [200, 400]
    assert isinstance(lines[0]["request_body"], dict)  # logged whole, as parsed
    assert_no_traceback(log_lines, caplog)


@pytest.mark.parametrize("depth", [200, 254, 255, 256, 490, 1023, 1024, 1025, 5000])
def test_the_issues_depths_get_a_400_before_the_upstream(
    make_stack: StackFactory,
    connect: Connect,
    log_lines: LogLines,
    caplog: pytest.LogCaptureFixture,
    depth: int,
) -> None:
    stack = make_stack(GATEWAY_LOG_BODIES="1", GATEWAY_MAX_RETRIES="0")
    connection = connect(stack)
    for body in (bracket_body(depth), tool_input_body(depth)):
        assert_error(post(connection, body), 400, "invalid_request_error")
    assert_error(post(connection, nested_tool_results(depth // 2)), 400, "invalid_request_error")
    assert stack.upstream_count == 0
    assert wait_until(lambda: len(log_lines.access()) == 3)
    assert_no_traceback(log_lines, caplog)


def test_sixteen_deep_bodies_with_logged_bodies_leave_sixteen_access_lines(
    make_stack: StackFactory, connect: Connect, log_lines: LogLines, caplog: pytest.LogCaptureFixture
) -> None:
    """Item 7: 16 requests nested 255-490 deep with GATEWAY_LOG_BODIES=1 (13 left no line)."""
    stack = make_stack(GATEWAY_LOG_BODIES="1", GATEWAY_MAX_RETRIES="0")
    connection = connect(stack)
    depths = [255 + 15 * i for i in range(16)]
    for index, depth in enumerate(depths):
        body = tool_input_body(depth, stream=index % 2 == 1)
        assert_error(post(connection, body), 400, "invalid_request_error")
    lines = wait_until(lambda: len(log_lines.access()) == 16 and log_lines.access())
    assert {line["status"] for line in lines} == {400}
    assert stack.upstream_count == 0  # nothing billed
    assert_no_traceback(log_lines, caplog)


def test_deep_requests_cost_one_short_log_line_each(
    make_stack: StackFactory, connect: Connect, log_lines: LogLines, caplog: pytest.LogCaptureFixture
) -> None:
    """Item 1: 300 requests wrote 43.5 MB of log (tracebacks); now one short access line each."""
    stack = make_stack(GATEWAY_MAX_RETRIES="0")
    connection = connect(stack)
    for depth in range(490, 790):
        assert_error(post(connection, nested_tool_results(depth // 2)), 400, "invalid_request_error")
    wait_until(lambda: len(log_lines.access()) == 300)
    assert len(log_lines.raw()) < 300 * 1024  # about 700 bytes a line
    assert_no_traceback(log_lines, caplog)
    normal = post(connection, tool_input_body(20))
    assert normal.status == 200


@pytest.mark.parametrize("stream", [False, True])
def test_every_recursive_step_holds_at_the_largest_allowed_limit(
    make_stack: StackFactory,
    connect: Connect,
    log_lines: LogLines,
    caplog: pytest.LogCaptureFixture,
    stream: bool,
) -> None:
    """GATEWAY_MAX_JSON_DEPTH=200: a session request 200 deep with markers at every level of nested
    tool_result blocks goes through the cache step (latches, normalisation, breakpoint trimming,
    prefix hashes, automatic breakpoints), the access log with its body, and the provider."""
    stack = make_stack(
        GATEWAY_MAX_JSON_DEPTH="200", GATEWAY_LOG_BODIES="1", GATEWAY_AUTO_CACHE="1", GATEWAY_MAX_RETRIES="0"
    )
    connection = connect(stack)
    body = nested_tool_results(97)  # 4 + 2 * 97 + 1 = 199 levels, markers on every block
    if stream:
        body = body[:-1] + b',"stream":true}'
    assert depth_of(body) == 199
    for _ in range(2):  # the second turn reuses the session's hashes
        answer = post(connection, body)
        assert answer.status < 500, answer.body[:300]
        assert stack.upstream_count > 0
    deepest = tool_input_body(200, stream=stream)
    assert post(connection, deepest).status == 200
    assert_error(post(connection, tool_input_body(201, stream=stream)), 400, "invalid_request_error")
    lines = wait_until(lambda: len(log_lines.access()) == 4 and log_lines.access())
    assert all("request_body" in line for line in lines[:3])
    assert_no_traceback(log_lines, caplog)


def test_a_long_body_is_logged_cut_not_reencoded(
    make_stack: StackFactory, connect: Connect, log_lines: LogLines
) -> None:
    stack = make_stack(GATEWAY_LOG_BODIES="1", GATEWAY_MAX_RETRIES="0")
    connection = connect(stack)
    text = "y" * (200 * 1024)
    body = orjson.dumps(
        {"model": "claude-sonnet-4-5", "max_tokens": 8, "messages": [{"role": "user", "content": text}]}
    )
    assert post(connection, body).status == 200
    (line,) = wait_until(lambda: log_lines.access())
    assert line["request_body_truncated"] is True
    assert line["request_body"] == body[: 64 * 1024].decode()


def test_a_wide_body_just_under_the_limit_costs_what_parsing_it_costs(
    make_stack: StackFactory, connect: Connect, tmp_path: Path
) -> None:
    """Measured before: the depth check wrote the parsed body indented (two spaces per level on every
    line), so 1 MB of small items 120 levels deep took 270 MB at peak, an 8 MB one 1 GB and 2.5 s of
    the event loop: a few such requests at once ran the process out of memory. Peak resident memory,
    each in a fresh process (tracemalloc would count orjson's untouched output reservation)."""
    wide = b"[" * 120 + b",".join([b"0"] * 2_000_000) + b"]" * 120
    body = b'{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"hi"}],'
    body += b'"metadata":{"user_id":"u","x":' + wide + b"}}"
    path = tmp_path / "wide.json"
    path.write_bytes(body)
    plain = _peak_rss(path, "orjson.loads(body)")
    checked = _peak_rss(path, "parse_json_object(body, 128)")
    assert checked < plain + 2 * len(body) + 8 * 2**20, (checked, plain)  # was ~120 MB more
    stack = make_stack(GATEWAY_MAX_RETRIES="0")
    assert post(connect(stack), body).status == 200


_MEASURE = """
import resource, sys, orjson
from gateway.inbound import parse_json_object
body = open(sys.argv[1], "rb").read()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
{parse}
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024)
"""


def _peak_rss(path: Path, parse: str) -> int:
    """How much the peak resident size grew while ``parse`` ran on the body in ``path``."""
    code = _MEASURE.format(parse=parse)
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True)
    return int(done.stdout.strip())
