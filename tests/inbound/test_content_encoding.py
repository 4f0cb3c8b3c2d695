"""Compressed request bodies (issue 13, item 3).

Observed before: invalid gzip/deflate was a plain 500; valid gzip was decompressed but
``Content-Encoding: gzip`` still went upstream with the plain body, the upstream could not decode
it and answered 500, and the gateway retried that: one client request became 11 upstream
requests over 46.6 s. Now gzip and deflate are decoded within limits and the upstream gets the
plain body with its own length, once; other codings get 415, corrupt data 400, bombs 413.
"""

from __future__ import annotations

import contextlib
import gzip
import logging
import zlib
from collections.abc import AsyncIterator

import orjson
import pytest
from aiohttp import web

from gateway.app import create_app
from tests.support.error_shape import assert_error
from tests.support.gateway_stack import CLIENT_KEY, Connect, StackFactory
from tests.support.log_lines import LogLines
from tests.support.raw_http import RawConnection, RawResponse, request_bytes
from tests.support.threaded import LoopThread

MESSAGES = [{"role": "user", "content": "compressed " * 200}]
PLAIN = orjson.dumps({"model": "claude-sonnet-4-5", "max_tokens": 16, "messages": MESSAGES})
COUNT = orjson.dumps({"model": "claude-sonnet-4-5", "messages": MESSAGES})


def raw_deflate(data: bytes) -> bytes:
    packer = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return packer.compress(data) + packer.flush()


def post(
    connection: RawConnection, body: bytes, encoding: str | None, path: str = "/v1/messages"
) -> RawResponse:
    headers = [("x-api-key", CLIENT_KEY), ("content-type", "application/json")]
    if encoding is not None:
        headers.append(("content-encoding", encoding))
    return connection.send(request_bytes("POST", path, headers, body))


def assert_quiet(log_lines: LogLines, caplog: pytest.LogCaptureFixture) -> None:
    assert "Traceback" not in log_lines.text() + caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


CODINGS = {
    "gzip": gzip.compress,
    "x-gzip": gzip.compress,
    "GZip": gzip.compress,
    "deflate": zlib.compress,
    "deflate (raw)": raw_deflate,
    "gzip (two members)": lambda data: gzip.compress(data[:100]) + gzip.compress(data[100:]),
    "identity": lambda data: data,
    "identity, gzip": gzip.compress,
}


@pytest.mark.parametrize("name", list(CODINGS))
def test_a_coded_body_goes_upstream_once_plain_with_its_own_length(
    make_stack: StackFactory,
    connect: Connect,
    log_lines: LogLines,
    caplog: pytest.LogCaptureFixture,
    name: str,
) -> None:
    stack = make_stack()  # the default retry policy: a 5xx upstream answer would be retried
    connection = connect(stack)
    encoding = name.partition(" (")[0]
    for path, plain in (("/v1/messages", PLAIN), ("/v1/messages/count_tokens", COUNT)):
        response = post(connection, CODINGS[name](plain), encoding, path)
        assert response.status == 200, response.body[:300]
    recorded = stack.emulator.requests
    assert len(recorded) == 2  # one upstream request per client request
    for upstream, plain in zip(recorded, (PLAIN, COUNT), strict=True):
        assert upstream.header("content-encoding") is None
        assert upstream.header("content-length") == str(len(plain))
        assert upstream.body == plain
    assert_quiet(log_lines, caplog)


def test_a_chunked_gzip_body_is_decoded_as_it_arrives(make_stack: StackFactory, connect: Connect) -> None:
    stack = make_stack()
    connection = connect(stack)
    coded = gzip.compress(PLAIN)
    chunks = b"".join(
        b"%x\r\n%s\r\n" % (len(coded[i : i + 50]), coded[i : i + 50]) for i in range(0, len(coded), 50)
    )
    headers = [
        ("x-api-key", CLIENT_KEY),
        ("content-encoding", "gzip"),
        ("transfer-encoding", "chunked"),
    ]
    raw = request_bytes("POST", "/v1/messages", headers, chunks + b"0\r\n\r\n", content_length=False)
    assert connection.send(raw).status == 200
    (upstream,) = stack.emulator.requests
    assert upstream.body == PLAIN


@pytest.mark.parametrize(
    "encoding,coded",
    [
        ("gzip", b"this is not gzip"),
        ("gzip", gzip.compress(PLAIN)[:-12]),  # truncated
        ("gzip", gzip.compress(PLAIN) + b"trailing"),
        ("deflate", b"\x78\x9cnot deflate"),
        ("deflate", zlib.compress(PLAIN) + b"x"),
        ("gzip", b""),
    ],
)
def test_corrupt_compressed_data_is_a_400(
    make_stack: StackFactory,
    connect: Connect,
    log_lines: LogLines,
    caplog: pytest.LogCaptureFixture,
    encoding: str,
    coded: bytes,
) -> None:
    stack = make_stack()
    response = post(connect(stack), coded, encoding)
    assert_error(response, 400, "invalid_request_error")
    assert stack.upstream_count == 0
    assert_quiet(log_lines, caplog)


@pytest.mark.parametrize("encoding", ["br", "zstd", "compress", "gzip, gzip", "gzip, br", "x-unknown", "*"])
def test_codings_the_gateway_does_not_decode_are_a_415(
    make_stack: StackFactory,
    connect: Connect,
    log_lines: LogLines,
    caplog: pytest.LogCaptureFixture,
    encoding: str,
) -> None:
    stack = make_stack()
    response = post(connect(stack), b"\x28\xb5\x2f\xfd" + PLAIN, encoding)
    error = assert_error(response, 415, "invalid_request_error")
    assert error["message"].endswith("send the request body uncompressed, or compressed with gzip or deflate")
    assert "unknown" not in error["message"] and "zstd" not in error["message"]  # never echoed
    assert response.header("accept-encoding") == "gzip, deflate"
    assert stack.upstream_count == 0
    assert_quiet(log_lines, caplog)


def test_a_zip_bomb_is_refused_after_a_bounded_read(make_stack: StackFactory, connect: Connect) -> None:
    """64 MiB of zeros (~64 KiB of gzip): refused at the ratio cap, never inflated whole."""
    stack = make_stack()
    bomb = gzip.compress(bytes(64 << 20), compresslevel=9)
    error = assert_error(post(connect(stack), bomb, "gzip"), 413, "request_too_large")
    assert "100 times" in error["message"]
    assert stack.upstream_count == 0


def test_a_body_inflating_beyond_the_size_limit_is_a_413(make_stack: StackFactory, connect: Connect) -> None:
    stack = make_stack(GATEWAY_MAX_BODY_BYTES="65536", GATEWAY_MAX_DECOMPRESSION_RATIO="1000000")
    within = orjson.dumps({"model": "m", "max_tokens": 1, "messages": [], "pad": "a" * 60_000})
    beyond = orjson.dumps({"model": "m", "max_tokens": 1, "messages": [], "pad": "a" * 70_000})
    connection = connect(stack)
    assert post(connection, gzip.compress(within), "gzip").status < 500
    assert_error(post(connection, gzip.compress(beyond), "gzip"), 413, "request_too_large")


@contextlib.asynccontextmanager
async def served_by_aiohttp_defaults(app: web.Application) -> AsyncIterator[int]:
    """``app`` on a plain ``AppRunner`` (not ``gateway.process.running``): aiohttp's parser
    inflates coded bodies itself."""
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield runner.addresses[0][1]
    finally:
        await runner.cleanup()


def test_a_body_aiohttp_already_inflated_keeps_the_same_limits(
    make_stack: StackFactory, loop_thread: LoopThread
) -> None:
    stack = make_stack()
    port = loop_thread.enter(served_by_aiohttp_defaults(create_app(stack.settings)))
    connection = RawConnection("127.0.0.1", port)
    try:
        assert post(connection, gzip.compress(PLAIN), "gzip").status == 200
        (upstream,) = stack.emulator.requests
        assert upstream.body == PLAIN and upstream.header("content-encoding") is None
        # (corrupt data is aiohttp's own affair there: its parser fails the connection)
        bomb = gzip.compress(b"\0" * (20 * 1024 * 1024), compresslevel=9)
        assert_error(post(connection, bomb, "gzip"), 413, "request_too_large")
        assert stack.upstream_count == 1
    finally:
        connection.close()


def test_a_body_of_many_gzip_members_is_refused_after_bounded_work(
    make_stack: StackFactory, connect: Connect
) -> None:
    """Observed before: 32 MB of empty gzip members (20 bytes each, 1.6 million of them) took 27 s
    of the gateway's time (a new inflater per member, and a copy of the rest of the chunk each:
    quadratic in the chunk), stalling every other client for seconds at a time."""
    stack = make_stack()
    connection = connect(stack)
    step = -(-len(PLAIN) // 64)  # the body in 64 members, the most one body may hold
    members = [gzip.compress(PLAIN[i : i + step], mtime=0) for i in range(0, len(PLAIN), step)]
    assert 50 < len(members) <= 64
    assert post(connection, b"".join(members), "gzip").status == 200  # several members are fine
    error = assert_error(post(connection, gzip.compress(b"", mtime=0) * 400_000, "gzip"), 400, "invalid_request_error")
    assert error["message"] == "request body could not be decompressed: more than 64 gzip members"
    assert stack.upstream_count == 1
