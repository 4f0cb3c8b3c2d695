"""The connection guard's caps and shedding order, and the per-team in-flight cap, in-process.

A real gateway app on loopback (``gateway.process.running``), raw sockets as clients, and a
"silent" upstream (a TCP server that reads and never answers) to hold requests in flight. Caps are
set tiny so each rule shows with a handful of connections.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import orjson
import pytest

from gateway.app import METRICS_KEY, create_app
from gateway.config import Settings
from gateway.connection_events import RateLimitedLog
from gateway.connections import ConnectionLimits, auto_max_connections
from gateway.process import RunningServer, running
from tests.support.local_app import serving_raw
from tests.support.log_lines import LogLines

CLIENT_KEY = "sk-client-conn"
PARTIAL = b"POST /v1/messages HTTP/1.1\r\nHost: g\r\nX-Slow: a"
BODY = orjson.dumps({"model": "claude-sonnet-4-5", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]})


class SilentUpstream:
    """An upstream that accepts, reads and never answers: requests to it stay in flight until
    :meth:`release` closes its connections (then they fail at once)."""

    def __init__(self) -> None:
        self.held: list[asyncio.StreamWriter] = []
        self.url = ""

    async def _hold(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.held.append(writer)
        while await reader.read(65536):
            pass

    def release(self) -> None:
        for writer in self.held:
            writer.close()


@asynccontextmanager
async def silent_upstream() -> AsyncIterator[SilentUpstream]:
    upstream = SilentUpstream()
    async with serving_raw(upstream._hold) as upstream.url:
        try:
            yield upstream
        finally:
            upstream.release()


@asynccontextmanager
async def gateway(upstream: SilentUpstream, **env: str) -> AsyncIterator[RunningServer]:
    settings = Settings.from_environ(
        {
            "GATEWAY_API_KEYS": CLIENT_KEY,
            "ANTHROPIC_API_KEY": "sk-upstream",
            "ANTHROPIC_BASE_URL": upstream.url,
            "GATEWAY_MAX_RETRIES": "0",
            **env,
        }
    )
    async with running(create_app(settings), "127.0.0.1", 0) as server:
        try:
            yield server
        finally:
            upstream.release()  # requests still in flight end now: the shutdown does not wait for them


async def until(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    """Poll the guard's state (it has no event to wait on) every 5 ms."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.005)


async def connect(server: RunningServer, data: bytes = b"") -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection(server.host, server.port)
    if data:
        writer.write(data)
        await writer.drain()
    return reader, writer


def request(path: str = "/v1/messages", key: str = CLIENT_KEY) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: g\r\nContent-Type: application/json\r\nx-api-key: {key}\r\n"
        f"Content-Length: {len(BODY)}\r\n\r\n"
    ).encode() + BODY


async def closed_with(reader: asyncio.StreamReader) -> bytes:
    """What the gateway sent before closing (fails if it does not close within 5 s)."""
    async with asyncio.timeout(5):
        return await reader.read()


async def still_open(reader: asyncio.StreamReader) -> bool:
    try:
        async with asyncio.timeout(0.2):
            return await reader.read(1) != b""
    except TimeoutError:
        return True


def error_of(answer: bytes) -> tuple[int, dict[str, object]]:
    head, _, body = answer.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    error = orjson.loads(body)
    assert error["type"] == "error"
    return status, error["error"]


async def test_over_the_incomplete_cap_the_oldest_incomplete_connection_is_shed() -> None:
    async with silent_upstream() as upstream, gateway(upstream, GATEWAY_MAX_INCOMPLETE_CONNECTIONS="3") as server:
        guard = server.guard
        assert guard is not None
        first, *_ = await connect(server, PARTIAL)
        await until(lambda: guard.incomplete == 1)
        others = [await connect(server, PARTIAL) for _ in range(2)]
        await until(lambda: guard.incomplete == 3)
        newest = await connect(server, PARTIAL)
        status, error = error_of(await closed_with(first))
        assert (status, error["type"]) == (503, "overloaded_error")
        assert [await still_open(reader) for reader, _ in [*others, newest]] == [True, True, True]
        assert guard.incomplete == 3 and guard.events.closed["shed_incomplete"] == 1
        for _, writer in [*others, newest]:
            writer.close()


async def test_a_shed_upload_ends_its_request_without_a_traceback(
    caplog: pytest.LogCaptureFixture, log_lines: LogLines
) -> None:
    """The oldest incomplete connection may be mid-body, its handler reading: the handler gets the
    gateway's 503 (one access-log line), not the ConnectionResetError of the closed socket."""
    head = (
        f"POST /v1/messages HTTP/1.1\r\nHost: g\r\nContent-Type: application/json\r\nx-api-key: {CLIENT_KEY}\r\n"
        "Content-Length: 1000\r\n\r\n{"
    ).encode()
    async with (
        silent_upstream() as upstream,
        gateway(upstream, GATEWAY_MAX_INCOMPLETE_CONNECTIONS="2") as server,
    ):
        guard = server.guard
        assert guard is not None
        with caplog.at_level(logging.INFO):
            upload, upload_writer = await connect(server, head)
            await until(lambda: guard.incomplete == 1)
            await asyncio.sleep(0.05)  # the handler is reading the body
            others = [await connect(server, PARTIAL) for _ in range(2)]
            assert await closed_with(upload) == b""  # shed mid-body: closed at once
            await until(lambda: len(log_lines.access()) == 1)
        (line,) = log_lines.access()
        assert (line["status"], line["error_type"], line["client_disconnected"]) == (503, "overloaded_error", True)
        assert not [record for record in caplog.records if record.levelno >= logging.ERROR]
        assert guard.events.closed["shed_incomplete"] == 1
        for _, writer in [*others, (upload, upload_writer)]:
            writer.close()


async def test_over_the_connection_cap_idle_keepalive_goes_before_a_new_client() -> None:
    async with (
        silent_upstream() as upstream,
        gateway(upstream, GATEWAY_MAX_CONNECTIONS="3", GATEWAY_MAX_INCOMPLETE_CONNECTIONS="3") as server,
    ):
        guard = server.guard
        assert guard is not None
        idle = []
        for _ in range(3):
            reader, writer = await connect(server, b"GET /healthz HTTP/1.1\r\nHost: g\r\n\r\n")
            assert (await reader.readuntil(b"}")).startswith(b"HTTP/1.1 200 ")
            idle.append((reader, writer))
        await until(lambda: guard.idle == 3)
        reader, writer = await connect(server, b"GET /healthz HTTP/1.1\r\nHost: g\r\nConnection: close\r\n\r\n")
        assert (await closed_with(reader)).startswith(b"HTTP/1.1 200 ")  # the newcomer is served...
        assert await closed_with(idle[0][0]) == b""  # ...the oldest idle connection made room, silently
        assert [await still_open(r) for r, _ in idle[1:]] == [True, True]
        assert guard.events.closed["shed_idle"] == 1
        for _, w in idle:
            w.close()


async def test_over_the_connection_cap_with_nothing_to_shed_the_new_client_is_refused() -> None:
    async with silent_upstream() as upstream, gateway(upstream, GATEWAY_MAX_CONNECTIONS="2") as server:
        guard = server.guard
        assert guard is not None
        busy = [await connect(server, request()) for _ in range(2)]  # held by the silent upstream
        await until(lambda: guard.open == 2 and guard.incomplete == 0 and guard.idle == 0)
        reader, writer = await connect(server)
        status, error = error_of(await closed_with(reader))
        assert (status, error["type"]) == (503, "overloaded_error")
        assert [await still_open(r) for r, _ in busy] == [True, True]
        assert guard.events.closed["refused"] == 1
        writer.close()
        for _, w in busy:
            w.close()


async def test_a_team_over_its_inflight_cap_gets_429(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.write_text("sk-team-a alpha\nsk-team-a2 alpha\nsk-team-b beta\n")
    env = {"GATEWAY_API_KEYS_FILE": str(keys), "GATEWAY_UPSTREAM_POOL_SIZE": "4"}  # two teams: cap 4 / 2
    async with silent_upstream() as upstream, gateway(upstream, **env) as server:
        held = [await connect(server, request(key=key)) for key in ("sk-team-a", "sk-team-a2")]
        await until(lambda: server.guard is not None and server.guard.incomplete == 0 and server.guard.open == 2)
        await asyncio.sleep(0.1)  # both requests reached the upstream
        reader, writer = await connect(server, request(key="sk-team-a"))
        answer = await reader.readuntil(b"}}")
        status, error = error_of(answer)
        assert (status, error["type"]) == (429, "rate_limit_error")
        assert b"retry-after: 1" in answer.lower()
        other, other_writer = await connect(server, request(key="sk-team-b"))  # another team is not limited
        assert await still_open(other)
        registry = server.runner.app[METRICS_KEY].registry
        rejected = {
            team: registry.get_sample_value("gateway_team_inflight_rejected_total", {"team": team})
            for team in ("alpha", "beta")
        }
        assert rejected == {"alpha": 1.0, "beta": 0.0}  # the key file's teams start at zero
        for _, w in [*held, (reader, writer), (other, other_writer)]:
            w.close()


def test_automatic_caps_leave_descriptors_for_the_upstream_pool() -> None:
    assert auto_max_connections(1024, 512) == 480  # (1024 - 64) / 2: each busy client may hold one upstream
    assert auto_max_connections(4096, 512) == 4096 - 64 - 512
    assert auto_max_connections(1 << 20, 512) == 10_000  # memory, not descriptors, bounds it then
    assert auto_max_connections(50, 512) == 16  # never below a usable minimum
    settings = Settings.from_environ({"GATEWAY_ALLOW_UNAUTHENTICATED": "1"})
    limits = ConnectionLimits.from_settings(settings, fd_limit=1024)
    assert (limits.max_connections, limits.max_incomplete) == (480, 240)
    explicit = Settings.from_environ(
        {"GATEWAY_ALLOW_UNAUTHENTICATED": "1", "GATEWAY_MAX_CONNECTIONS": "100", "GATEWAY_MAX_INCOMPLETE_CONNECTIONS": "500"}
    )
    assert (ConnectionLimits.from_settings(explicit).max_connections, ConnectionLimits.from_settings(explicit).max_incomplete) == (100, 100)


def test_warnings_are_rate_limited_per_event_class(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    logger = logging.getLogger("test.rate_limited")
    log = RateLimitedLog(logger, interval_s=10.0, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="test.rate_limited"):
        for _ in range(1000):
            log.warning("shed", "shed connections")
        log.warning("timeout", "timed out")
        now[0] = 10.0
        log.warning("shed", "shed connections")
    assert [record.getMessage() for record in caplog.records] == [
        "shed connections",
        "timed out",
        "shed connections (999 more since the previous line)",
    ]
    assert all(record.levelno == logging.WARNING and not record.exc_info for record in caplog.records)

