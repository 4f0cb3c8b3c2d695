"""A client that goes away, or stops reading, releases its upstream request (issue 13, item 5).

Real servers on loopback: a raw-socket client -> the gateway (``process.running``, as ``switchyard
serve`` runs it) -> a TCP relay that timestamps the gateway's upstream connections
(:mod:`tests.support.connection_watch`) -> the first-party emulator, whose fault directives make it
slow, stall mid-stream or answer 529 with ``retry-after`` (the slow-reader cases use an upstream
whose stream never ends, ``endless_upstream``).

Every case runs on asyncio's event loop and on uvloop, the one ``switchyard serve`` runs on
(``conftest.py``). Each checks what the upstream saw (its connection closed within 1 s of the
client's, or no further attempt) and the request's one access-log line and one
``gateway_requests_total`` sample.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import socket
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import orjson
import pytest
from aiohttp import web

from emulators import EmulatorConfig, RunningEmulator, run_emulator
from gateway.app import create_app
from gateway.config import Settings
from gateway.metrics import GatewayMetrics
from gateway.process import running
from tests.support.connection_watch import ConnectionWatch, connection_watch
from tests.support.log_lines import LogLines

KEY = "sk-gw-disconnect-9b2e"
UPSTREAM_KEY = "sk-upstream-disconnect-41c7"
MODEL = "claude-sonnet-4-6"
CLOSE_BOUND_S = 1.0  # the bound: the upstream sees its connection closed within 1 s
BIG_ANSWER_BYTES = 16 * 1024 * 1024  # more than the kernel's socket buffers take (tcp_wmem max: 4 MB)


@dataclass
class Rig:
    gateway_port: int
    watch: ConnectionWatch
    metrics: GatewayMetrics
    emulator: RunningEmulator | None = None

    @property
    def upstream_requests(self) -> int:
        assert self.emulator is not None
        return len(self.emulator.requests)

    def requests_total(self) -> dict[tuple[tuple[str, str], ...], float]:
        return {
            tuple(sorted(sample.labels.items())): sample.value
            for family in self.metrics.registry.collect()
            for sample in family.samples
            if sample.name == "gateway_requests_total" and sample.value
        }


@pytest.fixture(autouse=True)
def _info_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="switchyard")  # the access log and the retry lines


@contextlib.asynccontextmanager
async def gateway_to(host: str, port: int, **env: str) -> AsyncIterator[Rig]:
    """A gateway whose upstream is ``host:port``, through a :class:`ConnectionWatch`."""
    async with connection_watch(host, port) as watch:
        settings = Settings.from_environ(
            {
                "GATEWAY_API_KEYS": KEY,
                "ANTHROPIC_API_KEY": UPSTREAM_KEY,
                "ANTHROPIC_BASE_URL": watch.url,
                "GATEWAY_NONSTREAMING_FALLBACK": "0",
                **env,
            }
        )
        metrics = GatewayMetrics()
        async with running(create_app(settings, metrics=metrics), "127.0.0.1", 0) as server:
            yield Rig(server.port, watch, metrics)


@contextlib.asynccontextmanager
async def rig(**env: str) -> AsyncIterator[Rig]:
    """The gateway in front of the first-party emulator."""
    config = EmulatorConfig(api_keys=frozenset({UPSTREAM_KEY}))
    async with run_emulator(config) as emulator, gateway_to(emulator.host, emulator.port, **env) as found:
        found.emulator = emulator
        yield found


def _event(name: str, data: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps({"type": name, **data}) + b"\n\n"


@contextlib.asynccontextmanager
async def endless_upstream() -> AsyncIterator[tuple[str, int]]:
    """A first-party upstream whose streams never end (8 KB text deltas, as fast as they are taken)
    and whose non-streaming answers are ``BIG_ANSWER_BYTES`` of text. The emulator's answers are at
    most a few KB, and its ``trickle`` pings, written without yielding, would hold this event loop
    (which the gateway shares) while the buffers fill."""
    delta = _event("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": "x" * 8192}})
    usage = {"input_tokens": 12, "output_tokens": 1}
    message = {"id": "msg_endless", "type": "message", "role": "assistant", "model": MODEL}
    big = orjson.dumps(
        {
            **message,
            "content": [{"type": "text", "text": "x" * BIG_ANSWER_BYTES}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": usage,
        }
    )

    async def messages(request: web.Request) -> web.StreamResponse:
        if not orjson.loads(await request.read()).get("stream"):
            return web.Response(body=big, content_type="application/json")
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        await response.write(
            _event("message_start", {"message": {**message, "content": [], "usage": usage}})
            + _event("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}})
        )
        while True:  # cancelled when the gateway closes the connection
            await response.write(delta)
            await asyncio.sleep(0)

    app = web.Application()
    app.router.add_post("/v1/messages", messages)
    runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield "127.0.0.1", int(runner.addresses[0][1])
    finally:
        await runner.cleanup()


def _request(stream: bool, fault: str, max_tokens: int = 64) -> bytes:
    body = orjson.dumps(
        {
            "model": MODEL,
            "max_tokens": max_tokens,
            "stream": stream,
            "messages": [{"role": "user", "content": "Tell me about disconnects."}],
        }
    )
    head = (
        "POST /v1/messages HTTP/1.1\r\n"
        "Host: 127.0.0.1\r\n"
        f"x-api-key: {KEY}\r\n"
        "anthropic-version: 2023-06-01\r\n"
        "content-type: application/json\r\n"
        + (f"x-emulator-fault: {fault}\r\n" if fault else "")
        + f"content-length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def _connect(
    port: int, receive_buffer: int | None = None
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if receive_buffer is not None:  # before connect: the advertised window follows it
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    return await asyncio.open_connection(sock=sock, limit=2**20)


def _hang_up(writer: asyncio.StreamWriter) -> float:
    """Close the client's socket now; the time it was closed."""
    writer.transport.abort()  # no lingering: the connection is gone at once
    return time.monotonic()


async def _until(condition: Callable[[], object], timeout_s: float = 5.0) -> None:
    """Wait (polling every 5 ms) until ``condition()`` is true."""
    async with asyncio.timeout(timeout_s):
        while True:
            if condition():
                return
            await asyncio.sleep(0.005)


async def _access_line(log_lines: LogLines, timeout_s: float = 5.0) -> tuple[dict[str, Any], float]:
    """The request's one access-log line (waits for it; fails if there is more than one), and
    when it was first seen."""
    await _until(log_lines.access, timeout_s)
    seen_at = time.monotonic()
    await asyncio.sleep(0.05)  # nothing more arrives
    (line,) = log_lines.access()
    return line, seen_at


def _assert_counted_once(found: Rig, status_class: str, stream: str) -> None:
    requests = found.requests_total()
    assert list(requests.values()) == [1.0], requests
    (labels,) = requests
    assert dict(labels)["status_class"] == status_class
    assert dict(labels)["stream"] == stream


async def test_non_streaming_disconnect_closes_the_slow_upstream_request(log_lines: LogLines) -> None:
    async with rig() as found:
        _, writer = await _connect(found.gateway_port)
        writer.write(_request(stream=False, fault="stall_headers=20"))
        (upstream,) = await found.watch.opened()
        await _until(lambda: found.upstream_requests)  # the emulator holds it (answers in 20 s)
        left_at = _hang_up(writer)
        async with asyncio.timeout(5):
            await upstream.closed.wait()
        line, _ = await _access_line(log_lines)
        _assert_counted_once(found, "4xx", "false")
    assert upstream.closed_at is not None and not upstream.upstream_closed_first
    delay = upstream.closed_at - left_at
    print(f"non-streaming: upstream connection closed {delay * 1000:.1f} ms after the client's")
    assert delay < CLOSE_BOUND_S
    assert line["client_disconnected"] is True
    assert line["status"] == 499  # no answer existed yet: "client closed request"
    assert "waiting for the upstream" in line["failure"]
    assert line["stream"] is False


async def test_disconnect_before_the_body_arrived_is_accounted_once(log_lines: LogLines) -> None:
    async with rig() as found:
        _, writer = await _connect(found.gateway_port)
        request = _request(stream=False, fault="")
        writer.write(request[:-10])  # the body's last bytes never come
        await asyncio.sleep(0.1)  # the gateway has parsed the headers and waits for the body
        _hang_up(writer)
        line, _ = await _access_line(log_lines)
        _assert_counted_once(found, "4xx", "false")
        upstream_requests = found.upstream_requests
    assert upstream_requests == 0 and found.watch.connections == []
    assert (line["status"], line["client_disconnected"]) == (499, True)
    assert line["failure"] == "client disconnected before its request was read"


async def test_streaming_disconnect_closes_the_upstream_stream(log_lines: LogLines) -> None:
    async with rig(GATEWAY_STREAM_IDLE_TIMEOUT_S="60", GATEWAY_STREAM_IDLE_WARNING_S="60") as found:
        reader, writer = await _connect(found.gateway_port)
        # the upstream streams a few events, then goes silent for 20 s: the gateway waits on it
        writer.write(_request(stream=True, fault="stall_after=6:20"))
        (upstream,) = await found.watch.opened()
        seen = b""
        async with asyncio.timeout(5):
            while b"content_block_delta" not in seen:
                seen += await reader.read(65536)
        assert seen.startswith(b"HTTP/1.1 200")
        left_at = _hang_up(writer)
        async with asyncio.timeout(5):
            await upstream.closed.wait()
        line, _ = await _access_line(log_lines)
        _assert_counted_once(found, "2xx", "true")
    assert upstream.closed_at is not None and not upstream.upstream_closed_first
    delay = upstream.closed_at - left_at
    print(f"streaming: upstream connection closed {delay * 1000:.1f} ms after the client's")
    assert delay < CLOSE_BOUND_S
    assert line["client_disconnected"] is True
    assert line["status"] == 200  # what the client was being sent
    assert line["stream"] is True


async def test_disconnect_during_retry_backoff_makes_no_further_attempt(
    log_lines: LogLines, caplog: pytest.LogCaptureFixture
) -> None:
    retry_after_s = 1.0
    env = {"GATEWAY_MAX_RETRY_DELAY_S": "10", "GATEWAY_MAX_RETRIES": "3"}
    async with rig(**env) as found:
        _, writer = await _connect(found.gateway_port)
        # the first attempt is answered 529 with retry-after: the gateway waits 1 s to retry
        writer.write(_request(stream=False, fault=f"fail_first=1:529,retry_after={retry_after_s}"))
        await _until(lambda: any("retrying upstream request" in r.getMessage() for r in caplog.records))
        backoff_started = time.monotonic()
        assert found.upstream_requests == 1
        left_at = _hang_up(writer)
        line, seen_at = await _access_line(log_lines)
        logged_after = seen_at - left_at
        # past the moment the retry would have been sent, with a margin for a loaded machine
        await asyncio.sleep(max(0.0, backoff_started + retry_after_s + 0.75 - time.monotonic()))
        attempts = found.upstream_requests
        _assert_counted_once(found, "4xx", "false")
    print(f"back-off: access line {logged_after * 1000:.1f} ms after the client left")
    assert attempts == 1  # the back-off was cut short: no second attempt
    assert logged_after < CLOSE_BOUND_S
    assert line["client_disconnected"] is True
    assert line["status"] == 499
    assert line["failure"] == "client disconnected while retrying after status_529"
    assert line["retries"] == 0


async def test_client_that_stops_reading_a_stream_releases_the_upstream(
    log_lines: LogLines, caplog: pytest.LogCaptureFixture
) -> None:
    stall_s = 0.5
    env = {
        "GATEWAY_WRITE_STALL_TIMEOUT_S": str(stall_s),
        "GATEWAY_STREAM_IDLE_TIMEOUT_S": "60",
        "GATEWAY_STREAM_IDLE_WARNING_S": "60",
    }
    async with endless_upstream() as (host, port), gateway_to(host, port, **env) as found:
        reader, writer = await _connect(found.gateway_port, receive_buffer=4096)
        # the stream never ends: the gateway's writes to this client soon cannot complete
        writer.write(_request(stream=True, fault=""))
        (upstream,) = await found.watch.opened()
        seen = b""
        async with asyncio.timeout(5):
            while b"content_block_delta" not in seen:
                seen += await reader.read(4096)
        stopped_reading_at = time.monotonic()  # and never reads again until the upstream is gone
        wall_offset = time.time() - time.monotonic()
        async with asyncio.timeout(15):
            await upstream.closed.wait()
        line, _ = await _access_line(log_lines)
        _assert_counted_once(found, "2xx", "true")
        # the gateway closed this client's connection: what it had sent drains, then EOF or reset
        with contextlib.suppress(ConnectionError):
            async with asyncio.timeout(5):
                while await reader.read(65536):
                    pass
        writer.close()
    assert upstream.closed_at is not None and not upstream.upstream_closed_first
    (stalled,) = [r for r in caplog.records if "client stopped reading" in r.getMessage()]
    dropped_at = stalled.created - wall_offset  # when the gateway closed the client's connection
    waited = float(re.search(r"waited ([0-9.]+)s", line["failure"])[1])  # type: ignore[index]
    held = upstream.closed_at - stopped_reading_at
    released = upstream.closed_at - dropped_at
    print(
        f"slow reader: a write waited {waited:.2f}s; upstream closed {released * 1000:.1f} ms after the "
        f"client was dropped, {held * 1000:.1f} ms after it stopped reading (buffers filled meanwhile)"
    )
    assert stall_s <= waited < stall_s + 1.0  # the bound, as configured (plus a loaded loop's lag)
    assert released < CLOSE_BOUND_S
    assert held < stall_s + 3.0  # the bound, plus the time to fill the buffers (~0.2 s here)
    assert line["client_disconnected"] is True
    assert line["status"] == 200
    assert "stopped reading" in line["failure"]


async def test_client_that_does_not_take_a_large_answer_is_let_go(
    log_lines: LogLines, caplog: pytest.LogCaptureFixture
) -> None:
    """A non-streaming answer has released its upstream before it is written; a client that does
    not take it still loses its connection after the bound, rather than holding the handler, the
    answer's memory and the socket for as long as its TCP connection lives."""
    stall_s = 0.5
    async with (
        endless_upstream() as (host, port),
        gateway_to(host, port, GATEWAY_WRITE_STALL_TIMEOUT_S=str(stall_s)) as found,
    ):
        reader, writer = await _connect(found.gateway_port, receive_buffer=4096)
        writer.write(_request(stream=False, fault=""))  # and reads nothing
        line, _ = await _access_line(log_lines, timeout_s=10)
        _assert_counted_once(found, "2xx", "false")
        with contextlib.suppress(ConnectionError):  # the gateway closed it: EOF or reset
            async with asyncio.timeout(5):
                while await reader.read(2**20):
                    pass
        writer.close()
        (upstream,) = found.watch.connections
        upstream_open = upstream.closed_at is None
    waited = float(re.search(r"waited ([0-9.]+)s", line["failure"])[1])  # type: ignore[index]
    print(f"large answer: the write waited {waited:.2f}s, then the client was let go")
    assert stall_s <= waited < stall_s + 1.0
    assert (line["status"], line["client_disconnected"]) == (200, True)
    assert upstream_open  # read whole and back in the pool: nothing to release there


@pytest.mark.parametrize("value", ["0", "-1", "soon"])
def test_write_stall_setting_is_validated(value: str) -> None:
    from gateway.config import ConfigError

    with pytest.raises(ConfigError, match="GATEWAY_WRITE_STALL_TIMEOUT_S"):
        Settings.from_environ(
            {
                "GATEWAY_API_KEYS": KEY,
                "ANTHROPIC_API_KEY": UPSTREAM_KEY,
                "GATEWAY_WRITE_STALL_TIMEOUT_S": value,
            }
        )
