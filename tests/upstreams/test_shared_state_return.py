"""What a replica learnt while Redis was away survives Redis' return (a real redis-server, frozen with
``SIGSTOP`` and thawed with ``SIGCONT``).

A replica that cannot write keeps its placements and breaker changes in memory. When Redis answers
again, what Redis holds is older: a session moved during the outage must not go back to the upstream
it left, a breaker opened during the outage must not close without a probe, and a breaker closed by
a successful probe must not reopen from a record that predates it. What the fleet wrote after the
outage still wins. Skipped without redis-server.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import AsyncIterator, Iterator

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


@contextlib.contextmanager
def _frozen(server: RedisServer) -> Iterator[None]:
    assert server.process is not None
    os.kill(server.process.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(server.process.pid, signal.SIGCONT)


@contextlib.asynccontextmanager
async def _links(server: RedisServer, backoff: Clock) -> AsyncIterator[tuple[RedisLink, RedisLink]]:
    """Replica A's link (short timeout; its back-off on ``backoff``) and replica B's."""
    a = RedisLink(server.url, timeout_s=0.2, on_error=lambda: None, monotonic=backoff)
    b = RedisLink(server.url, timeout_s=5, on_error=lambda: None)
    try:
        yield a, b
    finally:
        await a.close()
        await b.close()


async def test_a_session_moved_while_redis_was_away_stays_moved(redis_server: RedisServer) -> None:
    clock, backoff = Clock(), Clock()
    async with _links(redis_server, backoff) as (link_a, link_b):
        a = RedisPlacementMap(100, 3600, link_a, clock=clock)
        b = RedisPlacementMap(100, 3600, link_b, clock=clock)
        await a.put("team", "moved", Placement("primary", clock()))
        await a.put("team", "fleet-moved", Placement("primary", clock()))
        clock.now += 10
        with _frozen(redis_server):
            await a.put("team", "moved", Placement("foundry", clock(), foreign=4))
            await a.put("team", "new", Placement("foundry", clock()))
            await a.put("team", "fleet-moved", Placement("foundry", clock()))
        backoff.now += 600  # A's back-off is over: it asks Redis again
        clock.now += 10
        await b.put("team", "fleet-moved", Placement("vertex", clock()))  # newer than A's
        assert await a.get("team", "moved") == Placement("foundry", 1_000_010.0, foreign=4)
        assert await a.get("team", "new") == Placement("foundry", 1_000_010.0)
        assert await a.get("team", "fleet-moved") == Placement("vertex", 1_000_020.0)
        # A wrote its outage placements back: the fleet follows them
        assert await b.get("team", "moved") == Placement("foundry", 1_000_010.0, foreign=4)
        assert await b.get("team", "new") == Placement("foundry", 1_000_010.0)


async def test_a_breaker_opened_while_redis_was_away_stays_open(redis_server: RedisServer) -> None:
    clock, backoff = Clock(), Clock()
    async with _links(redis_server, backoff) as (link_a, link_b):
        a = RedisBreakerBoard(["up"], OPTIONS, link_a, sync_s=0, clock=clock)
        b = RedisBreakerBoard(["up"], OPTIONS, link_b, sync_s=0, clock=clock)
        with _frozen(redis_server):
            await a.failure("up")
        assert a.state("up") is BreakerState.OPEN
        backoff.now += 600
        clock.now += 5
        await a.sync()
        assert a.state("up") is BreakerState.OPEN  # not closed by Redis' empty record
        await b.sync()
        assert b.state("up") is BreakerState.OPEN  # written back: the fleet skips it too
        clock.now += 120  # half-open: one probe for the fleet
        assert await a.acquire("up") and not await b.acquire("up")
        await a.success("up")
        await b.sync()
        assert a.state("up") is b.state("up") is BreakerState.CLOSED


async def test_a_breaker_half_open_while_redis_was_away_keeps_its_probe(redis_server: RedisServer) -> None:
    """Opened during the outage and half-open when Redis returns: the first request is a probe, not
    traffic let through by Redis' empty record (the probe slot script finds no ``open_until``)."""
    clock, backoff = Clock(), Clock()
    async with _links(redis_server, backoff) as (link_a, _):
        a = RedisBreakerBoard(["up"], OPTIONS, link_a, sync_s=3600, clock=clock)
        await a.sync()  # (its next sync is an hour away: the probe path meets Redis first)
        with _frozen(redis_server):
            await a.failure("up")
        backoff.now += 600
        clock.now += 121
        assert await a.acquire("up")  # the probe
        assert not await a.acquire("up")  # one at a time: still half-open, not closed
        await a.failure("up")  # the probe failed: open again, for the fleet too
        assert a.state("up") is BreakerState.OPEN


async def test_a_breaker_closed_while_redis_was_away_does_not_reopen(redis_server: RedisServer) -> None:
    clock, backoff = Clock(), Clock()
    async with _links(redis_server, backoff) as (link_a, link_b):
        a = RedisBreakerBoard(["up"], OPTIONS, link_a, sync_s=0, clock=clock)
        b = RedisBreakerBoard(["up"], OPTIONS, link_b, sync_s=0, clock=clock)
        await a.failure("up")  # open, in Redis too
        clock.now += 100
        with _frozen(redis_server):
            clock.now += 21  # half-open
            assert await a.acquire("up")  # Redis away: this replica's own count decides
            await a.success("up")  # the probe succeeded: closed here
        assert a.state("up") is BreakerState.CLOSED
        backoff.now += 600
        await a.sync()  # Redis still holds the open period the probe ended: not half-open again
        assert a.state("up") is BreakerState.CLOSED
        await b.sync()
        assert b.state("up") is BreakerState.CLOSED
        clock.now += 200
        await b.failure("up")  # the fleet opens it anew after the outage: that record wins
        await a.sync()
        assert a.state("up") is BreakerState.OPEN


async def test_an_open_period_from_the_outage_does_not_undo_the_fleets_later_close(
    redis_server: RedisServer,
) -> None:
    """A alone lost Redis and opened the circuit; B opened it too, probed and closed it. A's open
    (older than B's close, which Redis records) is dropped when A is back: B stays closed."""
    clock, backoff = Clock(), Clock()
    async with _links(redis_server, backoff) as (link_a, link_b):
        a = RedisBreakerBoard(["up"], OPTIONS, link_a, sync_s=0, clock=clock)
        b = RedisBreakerBoard(["up"], OPTIONS, link_b, sync_s=0, clock=clock)
        with _frozen(redis_server):
            await a.failure("up")  # A alone: open until t0+120, not written
        clock.now += 1
        await b.failure("up")
        clock.now += 125
        assert await b.acquire("up")
        await b.success("up")  # closed by the fleet at t0+126, after A's open
        clock.now += 300
        backoff.now += 600
        await a.sync()
        await b.sync()
        assert a.state("up") is b.state("up") is BreakerState.CLOSED
