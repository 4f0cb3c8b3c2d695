"""``GATEWAY_MAX_CONNECTIONS_PER_IP``: one client address's connections are capped, its own oldest
incomplete connection goes first, other addresses are not touched.

A real gateway app on loopback, raw sockets from two client addresses (127.0.0.1 and 127.0.0.2,
both loopback on Linux), the silent upstream of ``test_connections`` to hold requests in flight.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from prometheus_client import generate_latest

from gateway.app import create_app
from gateway.config import Settings
from gateway.connections import ConnectionGuard, peer_key
from gateway.metrics import GatewayMetrics
from gateway.process import RunningServer, running
from tests.unit.test_connections import (
    CLIENT_KEY,
    PARTIAL,
    SilentUpstream,
    closed_with,
    error_of,
    request,
    silent_upstream,
    still_open,
    until,
)

A, B = "127.0.0.1", "127.0.0.2"
HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: g\r\n\r\n"
Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter]


@asynccontextmanager
async def gateway(
    upstream: SilentUpstream, per_ip: int, **env: str
) -> AsyncIterator[tuple[RunningServer, ConnectionGuard, GatewayMetrics]]:
    settings = Settings.from_environ(
        {
            "GATEWAY_API_KEYS": CLIENT_KEY,
            "ANTHROPIC_API_KEY": "sk-upstream",
            "ANTHROPIC_BASE_URL": upstream.url,
            "GATEWAY_MAX_RETRIES": "0",
            "GATEWAY_MAX_CONNECTIONS_PER_IP": str(per_ip),
            **env,
        }
    )
    metrics = GatewayMetrics()
    async with running(create_app(settings, metrics=metrics), "127.0.0.1", 0) as server:
        assert server.guard is not None
        try:
            yield server, server.guard, metrics
        finally:
            upstream.release()


async def connect(server: RunningServer, source: str, data: bytes = b"") -> Conn:
    reader, writer = await asyncio.open_connection(server.host, server.port, local_addr=(source, 0))
    if data:
        writer.write(data)
        await writer.drain()
    return reader, writer


def close(*conns: Conn) -> None:
    for _, writer in conns:
        writer.close()


async def test_the_oldest_incomplete_of_that_address_is_shed_and_other_addresses_are_untouched(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with silent_upstream() as upstream, gateway(upstream, 3) as (server, guard, metrics):
        with caplog.at_level(logging.INFO):
            # the other address first: its connections are older than every one of A's
            others = [await connect(server, B, PARTIAL) for _ in range(3)]
            await until(lambda: guard.peer_connections(B) == 3)
            mine = [await connect(server, A, PARTIAL) for _ in range(3)]
            await until(lambda: guard.peer_connections(A) == 3 and guard.incomplete == 6)
            newest = await connect(server, A, PARTIAL)
            status, error = error_of(await closed_with(mine[0][0]))
            assert (status, error["type"]) == (503, "overloaded_error")
            assert "GATEWAY_MAX_CONNECTIONS_PER_IP" in str(error["message"]) and A not in str(
                error["message"]
            )
            alive = [*mine[1:], newest, *others]
            assert [await still_open(reader) for reader, _ in alive] == [True] * 6
            assert (guard.peer_connections(A), guard.peer_connections(B), guard.open) == (3, 3, 6)
            # a fifth from A sheds A's next oldest, never one of B's (older) connections
            fifth = await connect(server, A, PARTIAL)
            assert error_of(await closed_with(mine[1][0]))[0] == 503
            assert [await still_open(reader) for reader, _ in [mine[2], newest, fifth, *others]] == [True] * 6
        closed = guard.events.closed
        assert (closed["ip_shed_incomplete"], closed["shed_incomplete"], closed["ip_refused"]) == (2, 0, 0)
        exposition = generate_latest(metrics.registry).decode()
        assert 'gateway_connections_closed_total{reason="ip_shed_incomplete"} 2.0' in exposition
        assert 'gateway_connections_limit{kind="per_ip"} 3.0' in exposition
        assert A not in exposition and B not in exposition  # never an address as a label value
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
        assert not [r for r in caplog.records if A in r.getMessage()]
        close(*mine[2:], newest, fifth, *others)


async def test_an_address_with_only_busy_connections_is_refused_while_another_is_served() -> None:
    async with silent_upstream() as upstream, gateway(upstream, 2) as (server, guard, _):
        busy = [await connect(server, A, request()) for _ in range(2)]  # held by the silent upstream
        await until(lambda: guard.peer_connections(A) == 2 and guard.incomplete == 0)
        refused = await connect(server, A, HEALTHZ)
        status, error = error_of(await closed_with(refused[0]))
        assert (status, error["type"]) == (503, "overloaded_error")
        assert [await still_open(reader) for reader, _ in busy] == [True, True]  # busy: never shed
        served = await connect(server, B, HEALTHZ)
        assert (await served[0].readuntil(b"}")).startswith(b"HTTP/1.1 200 ")
        assert guard.events.closed["ip_refused"] == 1 and guard.events.closed["refused"] == 0
        assert guard.peer_connections(A) == 2
        close(*busy, refused, served)


async def test_an_idle_keepalive_connection_of_that_address_makes_room() -> None:
    async with silent_upstream() as upstream, gateway(upstream, 2) as (server, guard, _):
        idle = []
        for _ in range(2):
            conn = await connect(server, A, HEALTHZ)
            assert (await conn[0].readuntil(b"}")).startswith(b"HTTP/1.1 200 ")
            idle.append(conn)
        await until(lambda: guard.idle == 2)
        newcomer = await connect(server, A, b"GET /healthz HTTP/1.1\r\nHost: g\r\nConnection: close\r\n\r\n")
        assert (await closed_with(newcomer[0])).startswith(b"HTTP/1.1 200 ")  # served...
        assert await closed_with(idle[0][0]) == b""  # ...the oldest idle one of A closed silently
        assert await still_open(idle[1][0])
        assert guard.events.closed["ip_shed_idle"] == 1
        await until(lambda: guard.peer_connections(A) == 1)  # closed connections are forgotten
        close(*idle)


async def test_without_the_setting_one_address_is_not_capped() -> None:
    async with (
        silent_upstream() as upstream,
        gateway(upstream, 0, GATEWAY_MAX_INCOMPLETE_CONNECTIONS="64") as (
            server,
            guard,
            _,
        ),
    ):
        conns = [await connect(server, A, PARTIAL) for _ in range(20)]
        await until(lambda: guard.incomplete == 20)
        assert [await still_open(reader) for reader, _ in conns[:3]] == [True] * 3
        assert guard.peer_connections(A) == 0 and guard.per_ip == 0  # no per-address bookkeeping at all
        assert sum(guard.events.closed.values()) == 0
        close(*conns)


def test_peer_keys() -> None:
    assert peer_key(("192.0.2.7", 443)) == "192.0.2.7"
    # IPv6: one /64 is one key (a host picks any address in its /64), the next /64 another
    one = peer_key(("2001:db8:1:2::1", 443, 0, 0))
    assert one == peer_key(("2001:db8:1:2:ffff:ffff:ffff:ffff", 443, 0, 0))
    assert one == socket.inet_pton(socket.AF_INET6, "2001:db8:1:2::")[:8]
    assert one != peer_key(("2001:db8:1:3::1", 443, 0, 0))
    assert peer_key(("::ffff:192.0.2.7", 443, 0, 0)) == "192.0.2.7"  # dual-stack socket, IPv4 client
    assert peer_key(("fe80::1%eth0", 443, 0, 2)) == peer_key(("fe80::2", 443, 0, 2))
    assert peer_key("") is None and peer_key(None) is None  # a Unix socket: not capped
    assert peer_key(("not-an-address:", 1)) is None
