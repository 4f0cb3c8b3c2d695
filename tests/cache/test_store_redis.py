"""The Redis session store against a real redis-server: shared latches between gateway replicas,
an outage that fails no request, and the latches merging back once Redis returns."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest

from emulators import EmulatorConfig, RunningEmulator, run_emulator
from gateway.app import create_app
from gateway.cache.breaks import PreviousRequest
from gateway.cache.latches import Latches
from gateway.cache.prefix import prefix_hashes
from gateway.cache.redis_store import RedisSessionStore, session_keys
from gateway.cache.session_store import MemorySessionStore
from gateway.config import Settings
from gateway.metrics import GatewayMetrics
from gateway.process import RunningServer, running
from gateway.redis_link import RedisLink
from tests.support.cache_stack import Answer, cache_breaks, post, upstream_betas
from tests.support.cache_turns import Turn, claude_code_session
from tests.support.provider_stack import FIRST_PARTY_KEY, GATEWAY_KEY
from tests.support.redis_server import RedisServer, free_port
from tests.support.waiting import until

LATCHED = "context-1m-2025-08-07"
HASHES = prefix_hashes({"model": "m", "messages": [{"role": "user", "content": "hi"}]}, [])
TEAM = "team-a"
BACKOFF_S = 0.5  # RedisSessionStore's first back-off after a failure


def redis_store(url: str, errors: list[int] | None = None, *, idle_s: float = 60) -> RedisSessionStore:
    link = RedisLink(
        url, timeout_s=0.2, on_error=(lambda: errors.append(1)) if errors is not None else (lambda: None)
    )
    return RedisSessionStore(link, local=MemorySessionStore(100, idle_s), idle_s=idle_s)


@contextlib.asynccontextmanager
async def stores(url: str, count: int, **options: Any) -> AsyncIterator[list[RedisSessionStore]]:
    built = [redis_store(url, **options) for _ in range(count)]
    try:
        yield built
    finally:
        for store in built:
            await store.close()
            await store._link.close()


# -- the store on its own ---------------------------------------------------------------------------


async def test_replicas_share_latches_and_the_last_request(redis_server: RedisServer) -> None:
    async with stores(redis_server.url, 2) as (a, b):
        latches, previous = await a.begin(
            TEAM, "s", Latches(frozenset({LATCHED}), ttl_1h=False, global_scope=False)
        )
        assert latches == Latches(frozenset({LATCHED}), False, False) and previous is None
        a.finish(TEAM, "s", PreviousRequest(HASHES, 123.5, 4_000), None)
        redis = redis_server.client()
        await until(lambda: redis.hexists(session_keys(TEAM, "s")[0], "prefix"))
        # b never saw the beta, and its own first request asks for the hour: the session's first
        # decision stands
        latches, previous = await b.begin(TEAM, "s", Latches(frozenset({"effort-2025-11-24"}), ttl_1h=True))
        assert latches == Latches(frozenset({LATCHED, "effort-2025-11-24"}), ttl_1h=False, global_scope=False)
        assert previous == PreviousRequest(HASHES, 123.5, 4_000)
        view = await b.describe(TEAM, "s")
        assert view is not None and view.latches == latches
        assert await redis.smembers(session_keys(TEAM, "s")[1]) == {LATCHED.encode(), b"effort-2025-11-24"}
        assert await b.describe(TEAM, "unknown") is None
        await redis.aclose()


def test_session_keys_name_the_team_and_never_collide() -> None:
    """Team and id are both in the key; no two (team, id) pairs share a key, whatever the id
    (session ids may hold ``:``), and no key is one of the layout before teams."""
    assert session_keys("team-a", "e7ef4113") == (
        "switchyard:sessions:team-a:e7ef4113:record",
        "switchyard:sessions:team-a:e7ef4113:betas",
    )
    pairs = [
        (team, session)
        for team in ("a", "a:b", "b", "a%3Ab", "")
        for session in ("x", "b:x", "x:betas", "x:record", "betas", "a:b:x")
    ]
    keys = [key for team, session in pairs for key in session_keys(team, session)]
    assert len(set(keys)) == len(keys) == 2 * len(pairs)
    assert all(
        key.startswith("switchyard:sessions:") and not key.startswith("switchyard:session:") for key in keys
    )


async def test_two_teams_with_one_session_id_are_two_sessions_in_redis(redis_server: RedisServer) -> None:
    async with stores(redis_server.url, 2) as (a, b):
        await a.begin("team-a", "same", Latches(frozenset({LATCHED}), ttl_1h=True))
        a.finish("team-a", "same", PreviousRequest(HASHES, 1.0, 10), None)
        redis = redis_server.client()
        await until(lambda: redis.hexists(session_keys("team-a", "same")[0], "prefix"))
        # another replica, another team, the same id: nothing of team-a's session
        assert await b.describe("team-b", "same") is None
        latches, previous = await b.begin("team-b", "same", Latches())
        assert latches == Latches() and previous is None
        assert await redis.exists(session_keys("team-b", "same")[1]) == 0
        view = await b.describe("team-a", "same")
        assert view is not None and view.latches.betas == {LATCHED} and view.previous is not None
        await redis.aclose()


@pytest.mark.parametrize(("idle_s", "expected"), [(90.0, 90), (0.3, 1)])
async def test_session_keys_expire_after_the_idle_time(
    redis_server: RedisServer, idle_s: float, expected: int
) -> None:
    async with stores(redis_server.url, 1, idle_s=idle_s) as (store,):
        await store.begin(TEAM, "s", Latches(frozenset({LATCHED}), ttl_1h=True))
        redis = redis_server.client()
        assert 0 < await redis.ttl(session_keys(TEAM, "s")[0]) <= expected
        assert 0 < await redis.ttl(session_keys(TEAM, "s")[1]) <= expected
        await redis.aclose()


async def test_an_unreadable_record_counts_as_no_previous_request(redis_server: RedisServer) -> None:
    redis = redis_server.client()
    await redis.hset(
        session_keys(TEAM, "s")[0], mapping={"prefix": b'{"model": "m"}', "at": b"1", "cached": b"5"}
    )
    async with stores(redis_server.url, 1) as (store,):
        latches, previous = await store.begin(TEAM, "s", Latches(frozenset({LATCHED})))
        assert previous is None and latches.betas == {LATCHED}
    await redis.aclose()


async def test_the_history_check_is_stored_beside_the_record(redis_server: RedisServer) -> None:
    """Another replica reuses the session's history hashes too; the record itself stays what
    earlier versions read, and one they wrote (without the check) is read as before."""
    hashes = prefix_hashes({"model": "m", "messages": [{"role": "user", "content": c} for c in "ab"]}, [])
    key = session_keys(TEAM, "s")[0]
    redis = redis_server.client()
    async with stores(redis_server.url, 2) as (a, b):
        await a.begin(TEAM, "s", Latches())
        a.finish(TEAM, "s", PreviousRequest(hashes, 1.0, 10), None)
        await until(lambda: redis.hexists(key, "check"))
        assert "history_check" not in orjson.loads(await redis.hget(key, "prefix"))
        _, previous = await b.begin(TEAM, "s", Latches())
        assert previous is not None and previous.hashes.history_check == hashes.history_check != ""
        await redis.hdel(key, "check")
        _, previous = await b.begin(TEAM, "s", Latches())
        assert previous == PreviousRequest(hashes, 1.0, 10) and previous.hashes.history_check == ""
    await redis.aclose()


async def test_an_unreachable_redis_backs_off_without_escalating_on_concurrent_failures() -> None:
    errors: list[int] = []
    async with stores(f"redis://127.0.0.1:{free_port()}/0", 1, errors=errors) as (store,):
        results = await asyncio.gather(
            *(store.begin(TEAM, f"s{i}", Latches(frozenset({LATCHED}))) for i in range(5))
        )
        assert all(latches.betas == {LATCHED} for latches, _ in results)  # served from memory
        failures = len(errors)
        assert failures >= 1
        await store.begin(TEAM, "s0", Latches())  # within the back-off: Redis is not asked
        assert len(errors) == failures
        await asyncio.sleep(BACKOFF_S + 0.1)  # one back-off, however many requests failed at once
        await store.begin(TEAM, "s0", Latches())
        assert len(errors) == failures + 1


# -- two gateway replicas ---------------------------------------------------------------------------


async def gateway_replica(
    settings: Settings, stack: contextlib.AsyncExitStack
) -> tuple[RunningServer, GatewayMetrics]:
    metrics = GatewayMetrics()
    server = await stack.enter_async_context(running(create_app(settings, metrics=metrics), "127.0.0.1", 0))
    return server, metrics


async def session_view(
    http: aiohttp.ClientSession, server: RunningServer, session_id: str
) -> tuple[int, Any]:
    async with http.get(
        f"{server.base_url}/v1/sessions/{session_id}", headers={"x-api-key": GATEWAY_KEY}
    ) as response:
        return response.status, await response.json()


def store_errors(metrics: GatewayMetrics) -> float:
    return metrics.registry.get_sample_value("gateway_session_store_errors_total") or 0.0


async def test_two_replicas_share_one_redis_and_survive_its_outage(redis_server: RedisServer) -> None:
    async with contextlib.AsyncExitStack() as stack:
        emulator: RunningEmulator = await stack.enter_async_context(
            run_emulator(EmulatorConfig(api_keys=frozenset({FIRST_PARTY_KEY})))
        )
        settings = Settings.from_environ(
            {
                "GATEWAY_API_KEYS": GATEWAY_KEY,
                "ANTHROPIC_API_KEY": FIRST_PARTY_KEY,
                "ANTHROPIC_BASE_URL": emulator.base_url,
                "GATEWAY_MAX_RETRIES": "0",
                "GATEWAY_SESSION_STORE": redis_server.url,
                "GATEWAY_SESSION_STORE_TIMEOUT_S": "0.2",
            }
        )
        a, metrics_a = await gateway_replica(settings, stack)
        b, metrics_b = await gateway_replica(settings, stack)
        http = await stack.enter_async_context(aiohttp.ClientSession())
        redis = redis_server.client()
        stack.push_async_callback(redis.aclose)
        key, betas_key = session_keys("default", "shared")

        async def send(server: RunningServer, turn: Turn) -> Answer:
            answer = await post(http, server.base_url, turn)
            assert answer.status == 200, answer.body[:300]
            return answer

        async def recorded(messages: int) -> None:  # the replica's background write has landed
            async def landed() -> bool:
                prefix = await redis.hget(key, "prefix")
                return prefix is not None and len(orjson.loads(prefix)["messages"]) == messages

            await until(landed)

        first, second, third = claude_code_session("shared")
        one = await send(a, first)
        await recorded(2)
        # B drops the latched beta and asks for the hour: A's first request decided both
        for marker in second.markers():
            marker["ttl"] = "1h"
        two = await send(b, second.without_betas(LATCHED))
        assert LATCHED in upstream_betas(emulator.requests[-1])
        assert "ttl" not in str(Turn([], emulator.requests[-1].json()).markers())
        assert two.read == one.cached
        await recorded(4)
        three = await send(a, third.without_betas(LATCHED))
        assert LATCHED in upstream_betas(emulator.requests[-1])
        assert three.read == two.cached
        await recorded(6)
        # B names a break against the request A served: it read that record from Redis
        changed = third.copy().without_betas(LATCHED)
        changed.body["system"][2]["text"] += " Be terse."
        await send(b, changed)
        assert cache_breaks(metrics_a, "anthropic") == {"first_request": 1}
        assert cache_breaks(metrics_b, "anthropic") == {"system_changed": 1}
        status, view = await session_view(http, b, "shared")
        assert status == 200 and LATCHED in view["latches"]["betas"] and view["latches"]["ttl_1h"] is False
        assert store_errors(metrics_a) == store_errors(metrics_b) == 0

        # Redis goes away: no failed request, the latches live on in memory, the errors are counted
        redis_server.stop()
        during = await send(b, changed)
        assert LATCHED in upstream_betas(emulator.requests[-1])
        assert "ttl" not in str(Turn([], emulator.requests[-1].json()).markers())
        assert during.read > 0
        assert store_errors(metrics_b) > 0
        status, view = await session_view(http, b, "shared")
        assert status == 200 and LATCHED in view["latches"]["betas"]
        assert cache_breaks(metrics_b, "anthropic") == {"system_changed": 1}  # no false break either

        # Redis is back (empty) on the same port: after the back-off the next request merges the
        # session's latches back in
        redis_server.start()
        await redis.aclose()
        redis = redis_server.client()  # a fresh connection: the old one died with the server
        stack.push_async_callback(redis.aclose)
        assert await redis.exists(betas_key) == 0
        await asyncio.sleep(BACKOFF_S + 0.1)
        await send(b, changed)
        members = {m.decode() for m in await redis.smembers(betas_key)}
        assert LATCHED in members and set(view["latches"]["betas"]) <= members
        assert await redis.hget(key, "ttl_1h") == b"0"
        await recorded(6)
        # and A, which never saw the outage, keeps serving the session
        await send(a, changed.copy())
        assert LATCHED in upstream_betas(emulator.requests[-1])
        assert store_errors(metrics_a) == 0, (
            "a stale pooled connection after the restart counted as an outage"
        )
