"""Half-open probe slots shared by every replica through a real redis-server.

With ``half_open_probes: N`` the whole fleet sends N probes when a breaker half-opens, not N per
replica; a slot taken by a replica that never reports (it died mid-probe) frees after
``probe_slot_s``. Skipped without redis-server.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import anthropic
import pytest

from gateway.app import create_app
from gateway.process import running
from gateway.redis_link import RedisLink
from gateway.upstreams.breaker import BreakerState
from gateway.upstreams.breaker_redis import RedisBreakerBoard, probes_key
from gateway.upstreams.config import BreakerOptions
from tests.support.redis_server import RedisServer
from tests.upstreams.harness import CLIENT_KEY, MODEL, SYSTEM, four_upstreams

pytestmark = pytest.mark.timeout(60)
STORM = "fail_first=1000000:529,retry_after_ms=1"


class Clock:
    """Wall-clock seconds the breakers read (moved by the test)."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@contextlib.asynccontextmanager
async def _boards(
    server: RedisServer, options: BreakerOptions, clock: Clock, count: int
) -> AsyncIterator[list[RedisBreakerBoard]]:
    """``count`` replicas' boards, each with its own Redis connection."""
    errors: list[int] = []
    shared = [RedisLink(server.url, timeout_s=5, on_error=lambda: errors.append(1)) for _ in range(count)]
    boards = [RedisBreakerBoard(["up"], options, s, sync_s=0, clock=clock) for s in shared]
    try:
        yield boards
    finally:
        for board, connection in zip(boards, shared, strict=True):
            await board.close()
            await connection.close()
    assert not errors  # every answer came from Redis, none from a replica's local fallback


async def _taken(server: RedisServer) -> int:
    redis = server.client()
    try:
        return int(await redis.zcard(probes_key("up")))
    finally:
        await redis.aclose()


async def test_the_fleet_shares_its_half_open_slots(redis_server: RedisServer) -> None:
    clock = Clock()
    options = BreakerOptions(failures=1, open_s=10, half_open_probes=2, probe_slot_s=30)
    async with _boards(redis_server, options, clock, 3) as (a, b, c):
        await a.failure("up")
        await b.sync()
        await c.sync()  # (the request path syncs before it plans, at most every sync_s)
        assert a.state("up") is b.state("up") is c.state("up") is BreakerState.OPEN
        clock.now += 11  # half-open for both
        assert await a.acquire("up") and await b.acquire("up")  # the fleet's two slots
        assert not await a.acquire("up") and not await b.acquire("up")  # each replica's own limit is 2
        assert await _taken(redis_server) == 2
        a.release("up")  # a's request ended without an outcome: its slot goes back to the fleet
        await a.close()  # (waits for the give-back)
        assert await _taken(redis_server) == 1
        assert await b.acquire("up")  # b now holds both, and dies without reporting
        assert not await a.acquire("up") and not await c.acquire("up")
        clock.now += 29
        assert not await c.acquire("up")  # b's slots are still within probe_slot_s
        clock.now += 2
        assert await c.acquire("up") and await a.acquire("up")  # expired: free again
        await c.failure("up")  # c's probe failed: open again for everybody, every slot freed
        assert await _taken(redis_server) == 0
        await a.sync()
        assert a.state("up") is BreakerState.OPEN and not await a.acquire("up")
        clock.now += 11
        assert await a.acquire("up")
        await a.success("up")  # a's probe succeeded: closed for everybody
        assert c.state("up") is BreakerState.HALF_OPEN  # c has not synced yet ...
        assert await c.acquire("up")  # ... and learns from the script that it closed
        assert c.state("up") is BreakerState.CLOSED and c.probes("up") == 0


async def test_two_gateways_send_exactly_the_configured_probes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, redis_server: RedisServer
) -> None:
    clock = Clock()
    sections = {
        "failover": {"same_upstream_retries": 0},
        "breaker": {"failures": 1, "open_s": 10, "half_open_probes": 1, "sync_s": 0},
    }
    env = {
        "GATEWAY_SESSION_STORE": redis_server.url,
        "GATEWAY_FIRST_BYTE_TIMEOUT_S": "20",
        "GATEWAY_UPSTREAM_HEADER": "1",  # which upstream answered
    }
    async with (
        four_upstreams(
            tmp_path,
            monkeypatch,
            sections=sections,
            env=env,
            providers=("anthropic", "bedrock"),
            app_kwargs={"wall_clock": clock},
        ) as fleet,
        running(create_app(fleet.settings, wall_clock=clock), "127.0.0.1", 0) as second,
        contextlib.AsyncExitStack() as closers,
    ):
        clients = [
            anthropic.AsyncAnthropic(api_key=CLIENT_KEY, base_url=url, max_retries=0)
            for url in (fleet.url, second.base_url)
        ]
        closers.push_async_callback(clients[0].close)
        closers.push_async_callback(clients[1].close)

        async def turn(client: anthropic.AsyncAnthropic, text: str) -> str:
            raw = await client.messages.with_raw_response.create(
                model=MODEL, max_tokens=16, system=SYSTEM, messages=[{"role": "user", "content": text}]
            )
            return raw.headers["x-gateway-upstream"]

        primary = fleet.emulators["primary"]
        primary.set_fault(STORM)
        assert await turn(clients[0], "opens the primary's breaker") == "bedrock"
        assert fleet.served("primary") == 1
        clock.now += 11  # half-open for both gateways
        primary.set_fault("stall_headers=3")  # the probe is still in flight while the others arrive
        probe = asyncio.create_task(turn(clients[1], "the probe"))
        deadline = asyncio.get_running_loop().time() + 15
        while fleet.served("primary") < 2:
            assert asyncio.get_running_loop().time() < deadline, "the probe never reached the primary"
            await asyncio.sleep(0.02)
        others = await asyncio.gather(*(turn(clients[i % 2], f"meanwhile {i}") for i in range(6)))
        assert others == ["bedrock"] * 6  # neither gateway had a probe slot left
        assert await asyncio.wait_for(probe, 20) == "primary"
        assert fleet.served("primary") == 2  # the failed request, then exactly one probe
        assert await turn(clients[0], "after the probe") == "primary"  # closed for the fleet
