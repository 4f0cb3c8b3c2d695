"""A Redis restarted without persistence (a real redis-server, stopped and started on its port)
loses the fleet's breakers and placements; the replicas still hold them. A circuit open on a
replica stays open (it was closed for every replica, sending traffic back to the upstream it had
left), and a session's placement stays (it was sent back to its route's first upstream, a cold
cache, uncounted as a move). Each is written back, so every replica follows again. Skipped without
redis-server.
"""

from __future__ import annotations

import pytest

from gateway.redis_link import RedisLink
from gateway.upstreams.affinity import Placement, RedisPlacementMap
from gateway.upstreams.breaker import BreakerState
from gateway.upstreams.breaker_redis import RedisBreakerBoard
from gateway.upstreams.config import BreakerOptions
from tests.support.redis_server import RedisServer
from tests.upstreams.test_shared_probes import Clock

pytestmark = pytest.mark.timeout(60)
OPTIONS = BreakerOptions(failures=1, window_s=60, open_s=120, half_open_probes=1, probe_slot_s=30)


def _restart(server: RedisServer) -> None:
    server.stop()
    server.start()


async def test_placements_survive_a_redis_restart(redis_server: RedisServer) -> None:
    clock = Clock()
    a_link = RedisLink(redis_server.url, timeout_s=5, on_error=lambda: None)
    b_link = RedisLink(redis_server.url, timeout_s=5, on_error=lambda: None)
    try:
        a = RedisPlacementMap(100, 3600, a_link, clock=clock)
        b = RedisPlacementMap(100, 3600, b_link, clock=clock)
        await a.put("team", "moved", Placement("bedrock", clock(), foreign=2))
        _restart(redis_server)
        clock.now += 10
        assert await a.get("team", "moved") == Placement("bedrock", 1_000_000.0, foreign=2)
        assert await b.get("team", "moved") == Placement("bedrock", 1_000_000.0, foreign=2)
    finally:
        await a_link.close()
        await b_link.close()


async def test_an_open_breaker_survives_a_redis_restart_but_not_the_fleets_close(
    redis_server: RedisServer,
) -> None:
    clock = Clock()
    a_link = RedisLink(redis_server.url, timeout_s=5, on_error=lambda: None)
    b_link = RedisLink(redis_server.url, timeout_s=5, on_error=lambda: None)
    try:
        a = RedisBreakerBoard(["up"], OPTIONS, a_link, sync_s=0, clock=clock)
        b = RedisBreakerBoard(["up"], OPTIONS, b_link, sync_s=0, clock=clock)
        await a.failure("up")
        await b.sync()
        assert a.state("up") is b.state("up") is BreakerState.OPEN
        _restart(redis_server)
        clock.now += 10
        await a.sync()
        await b.sync()
        assert a.state("up") is b.state("up") is BreakerState.OPEN  # written back, not closed for all
        fresh_link = RedisLink(redis_server.url, timeout_s=5, on_error=lambda: None)
        try:  # a replica started after the restart learns it too
            fresh = RedisBreakerBoard(["up"], OPTIONS, fresh_link, sync_s=0, clock=clock)
            await fresh.sync()
            assert fresh.state("up") is BreakerState.OPEN
        finally:
            await fresh_link.close()
        clock.now += 120  # half-open: B's probe succeeds and closes it for the fleet
        assert await b.acquire("up")
        await b.success("up")
        await a.sync()
        assert a.state("up") is BreakerState.CLOSED
    finally:
        await a_link.close()
        await b_link.close()
