"""A body with many ``cache_control`` markers (the API allows four; the gateway keeps the four that
matter and drops the rest, up to ``MAX_MARKERS``; more are refused as the API refuses a fifth).

Observed before: the line saying which were dropped named every one of them (290,000 markers in a
30 MB body: one 7.7 MB log line, enough to fill the log writer's 4 MiB buffer and have other
requests' lines dropped), and those markers held the event loop for 8.8 s (~30 us each across the
cache step). Now the line names eight and counts the rest, and a body past ``MAX_MARKERS`` is a 400.
"""

from __future__ import annotations

import logging

import orjson
import pytest

from gateway.cache.normalise import MAX_MARKERS
from tests.support.error_shape import assert_error
from tests.support.gateway_stack import CLIENT_KEY, Connect, StackFactory
from tests.support.raw_http import request_bytes

MARKERS = MAX_MARKERS


def test_the_dropped_breakpoints_line_stays_short(
    make_stack: StackFactory, connect: Connect, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="switchyard.cache")
    block = {"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}
    body = orjson.dumps(
        {"model": "claude-sonnet-4-5", "max_tokens": 16, "messages": [{"role": "user", "content": [block] * MARKERS}]}
    )
    stack = make_stack(GATEWAY_MAX_RETRIES="0")
    headers = [("x-api-key", CLIENT_KEY), ("content-type", "application/json")]
    answer = connect(stack).send(request_bytes("POST", "/v1/messages", headers, body))
    assert answer.status == 200, answer.body[:300]
    (upstream,) = stack.emulator.requests
    sent = orjson.loads(upstream.body)["messages"][0]["content"]
    assert sum("cache_control" in b for b in sent) == 4
    (line,) = [r.getMessage() for r in caplog.records if "more than 4 cache breakpoints" in r.getMessage()]
    assert line.startswith("more than 4 cache breakpoints: dropped messages/0/content/0, messages/0/content/1")
    assert line.endswith(f" and {MARKERS - 4 - 8} more")
    assert len(line) < 400


def test_markers_past_the_bound_are_refused_after_bounded_work(make_stack: StackFactory, connect: Connect) -> None:
    block = {"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}
    content = [block] * 200_000  # 5 MB: ~6 s of the event loop when every marker was processed
    body = orjson.dumps({"model": "claude-sonnet-4-5", "max_tokens": 16, "messages": [{"role": "user", "content": content}]})
    stack = make_stack(GATEWAY_MAX_RETRIES="0")
    headers = [("x-api-key", CLIENT_KEY), ("content-type", "application/json")]
    answer = connect(stack).send(request_bytes("POST", "/v1/messages", headers, body))
    assert_error(answer, 400, "invalid_request_error")
    assert b"A maximum of 4 blocks with cache_control may be provided" in answer.body
    assert stack.emulator.requests == []  # refused before the cache step's per-marker work
