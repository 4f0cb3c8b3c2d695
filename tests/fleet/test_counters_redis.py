"""Counters in a real redis-server: group pools, fail-open and fail-closed, and two gateway
processes sharing one Redis with 50 concurrent requests racing at a cap (the overshoot is measured:
it is bounded by the requests already in flight when the cap was reached)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from emulators import EmulatorConfig, emulator_in_thread
from gateway.errors import GatewayError
from gateway.fleet.counters import MemoryCounters
from gateway.fleet.counters_redis import RedisCounters
from gateway.fleet.policy import Policy
from gateway.fleet.policy_file import parse_policy
from gateway.fleet.policy_gate import PolicyGate
from gateway.fleet.policy_reload import PolicyHolder
from gateway.fleet.principal import Principal, Source
from gateway.redis_link import RedisLink
from gateway.streaming.usage import Usage
from tests.support.fleet_stack import messages_request
from tests.support.redis_server import RedisServer, running_redis
from tests.support.serve_process import serve_process

UPSTREAM_KEY = "sk-up-fleet-redis"
CLIENT_KEY = "sk-client-fleet-redis"
POOL_POLICY = "groups: [{group: eng, pool: {monthly_usd: 1.0}}]\n"


@pytest.fixture(scope="module")
def redis() -> Iterator[RedisServer]:
    with running_redis() as server:
        yield server




def member(name: str) -> Principal:
    return Principal(f"idp|{name}", f"idp|{name}", ("eng",), f"{name}@example.com", Source.TOKEN)


async def pool_blocks_both(gate: PolicyGate) -> None:
    ann, bob = member("ann"), member("bob")
    first = await gate.admit(ann, messages_request(), "r1")
    assert first is not None and first.headers["anthropic-ratelimit-unified-status"] == "allowed"
    gate.record(first, 0.6, Usage(10, 10))
    await gate.counters.flush()  # Redis writes happen in the background, off the request path
    second = await gate.admit(bob, messages_request(), "r2")  # bob sees ann's spend: 60 % of the pool
    assert second is not None and second.headers["anthropic-ratelimit-unified-overage-utilization"] == "0.6"
    gate.record(second, 0.5, Usage(10, 10))
    await gate.counters.flush()
    for who in (ann, bob):
        with pytest.raises(GatewayError) as raised:
            await gate.admit(who, messages_request(), "r3")
        headers = raised.value.response_headers()
        assert raised.value.error_type == "billing_error"
        assert headers["anthropic-ratelimit-unified-overage-scope"] == "group_pool"
        assert headers["anthropic-ratelimit-unified-overage-period"] == "monthly"
    outsider = Principal("idp|eve", "idp|eve", ("sales",))
    assert await gate.admit(outsider, messages_request(), "r4") is not None


def test_a_group_pool_blocks_two_users_together_in_memory() -> None:
    gate = PolicyGate(PolicyHolder(Policy(parse_policy(POOL_POLICY, "p.yaml"))), MemoryCounters())
    asyncio.run(pool_blocks_both(gate))


def test_a_group_pool_blocks_two_users_together_in_redis(redis: RedisServer) -> None:
    async def run() -> None:
        counters = RedisCounters(RedisLink(redis.url, timeout_s=1.0, on_error=lambda: None))
        try:
            await counters._redis.flushdb()
            await pool_blocks_both(
                PolicyGate(PolicyHolder(Policy(parse_policy(POOL_POLICY, "p.yaml"))), counters)
            )
        finally:
            await counters.close()
            await counters._link.close()

    asyncio.run(run())


def dead_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed again: nothing listens there


@pytest.mark.parametrize("fail_closed", [False, True])
def test_a_counter_outage_fails_open_or_closed(fail_closed: bool) -> None:
    async def run() -> None:
        counters = RedisCounters(RedisLink(f"redis://127.0.0.1:{dead_port()}/0", timeout_s=0.2, on_error=lambda: None))
        policy = Policy(parse_policy("base: {spend_caps: {daily_usd: 5}}\n", "p.yaml"))
        gate = PolicyGate(PolicyHolder(policy), counters, fail_closed=fail_closed)
        try:
            if not fail_closed:
                assert await gate.admit(member("ann"), messages_request(), "r1") is None  # through, unmetered
                return
            with pytest.raises(GatewayError) as raised:
                await gate.admit(member("ann"), messages_request(), "r1")
            assert raised.value.status == 429
            assert raised.value.response_headers() == {
                "content-type": "application/json",
                "anthropic-ratelimit-unified-overage-disabled-reason": "fetch_error",
                "x-should-retry": "false",
            }
        finally:
            await counters.close()
            await counters._link.close()

    asyncio.run(run())


def test_two_gateways_sharing_redis_hold_the_cap(redis: RedisServer, tmp_path: Path) -> None:
    """Each request costs the same (fixed emulator answer); the cap fits 10.5 of them. 9 go first,
    one at a time, then 50 race (sent 40 ms apart, streaming slowly) through two gateway processes. Exactly the
    recorded requests are counted (no lost or double update across processes); the ones admitted
    beyond the serial count (2) are bounded by the requests in flight, and once they finish both
    gateways refuse."""
    config = EmulatorConfig(api_keys=frozenset({UPSTREAM_KEY}), chunk_delay_s=0.05)
    with emulator_in_thread(config) as emulator:
        probe = requests.post(
            emulator.base_url + "/v1/messages",
            json={
                "model": "claude-sonnet-4-5",
                "max_tokens": 16,
                "messages": [{"role": "user", "content": "hi"}],
            },
            headers={"x-api-key": UPSTREAM_KEY, "anthropic-version": "2023-06-01"},
            timeout=10,
        ).json()["usage"]
        cost_micros = probe["input_tokens"] * 3 + probe["output_tokens"] * 15  # Sonnet 4.5, micro-USD
        policy = tmp_path / "policy.yaml"
        policy.write_text(f"base: {{spend_caps: {{daily_usd: {cost_micros * 10.5 / 1e6!r}}}}}\n")
        env = {
            "GATEWAY_API_KEYS": CLIENT_KEY,
            "ANTHROPIC_API_KEY": UPSTREAM_KEY,
            "ANTHROPIC_BASE_URL": emulator.base_url,
            "GATEWAY_POLICY_FILE": str(policy),
            "GATEWAY_SESSION_STORE": redis.url,
        }
        asyncio.run(_flush(redis))
        with (
            serve_process(env, tmp_path / "a.log") as first,
            serve_process(env, tmp_path / "b.log") as second,
        ):
            urls = [first.base_url, second.base_url]
            body = {
                "model": "claude-sonnet-4-5",
                "max_tokens": 16,
                "stream": True,
                "messages": [{"role": "user", "content": "hi"}],
            }

            def timed(index: int, stagger_s: float = 0.0) -> tuple[float, float, int]:
                time.sleep(index * stagger_s)
                started = time.monotonic()
                response = requests.post(
                    urls[index % 2] + "/v1/messages", json=body, headers={"x-api-key": CLIENT_KEY}, timeout=30
                )
                return started, time.monotonic(), response.status_code

            def send(index: int) -> int:
                return timed(index)[2]

            assert [send(i) for i in range(9)] == [200] * 9
            time.sleep(0.3)  # the background spend writes of the serial requests
            with concurrent.futures.ThreadPoolExecutor(50) as pool:
                # all 50 at once, but for a 40 ms stagger between sends: at the cap some are in flight
                # and some start clearly later (those must be refused)
                results = list(pool.map(lambda i: timed(i, 0.04), range(50)))
            statuses = [status for _, _, status in results]
            admitted = statuses.count(200)
            assert set(statuses) <= {200, 429}
            deadline = time.monotonic() + 10  # the spend writes run in the background
            while (spent := asyncio.run(_spent(redis))) < (
                9 + admitted
            ) * cost_micros and time.monotonic() < deadline:
                time.sleep(0.1)
            assert spent == (9 + admitted) * cost_micros  # every admitted request counted once
            assert 2 <= admitted <= 50
            # the cap is reached once two racing requests have finished: a request admitted beyond
            # those two was already in flight then (started before it; 1 s allows for the close
            # and the background Redis write on a loaded machine, where they take milliseconds)
            reached_at = sorted(end for _, end, status in results if status == 200)[1]
            late = [status for started, _, status in results if started > reached_at + 1.0]
            assert late and all(status == 429 for status in late)
            assert send(0) == 429 and send(1) == 429
            overshoot = admitted - 2
            print(f"\nrequests started 1 s after the cap was reached: {len(late)}, all refused")
            print(
                f"\n50 racing requests through 2 gateways: {admitted} admitted (serial: 2), overshoot {overshoot} "
                f"requests = {overshoot / 10.5:.0%} of the cap"
            )


async def _flush(redis: RedisServer) -> None:
    client: Any = redis.client()
    await client.flushdb()
    await client.aclose()


async def _spent(redis: RedisServer) -> int:
    client: Any = redis.client()
    keys = [key async for key in client.scan_iter("switchyard:fleet:spend:user:*:daily:*")]
    values = [int(v) for v in await client.mget(keys)]
    await client.aclose()
    assert len(values) == 1
    return values[0]


def test_a_cap_set_on_one_replica_holds_on_the_other(redis: RedisServer, tmp_path: Path) -> None:
    admin = "sk-admin-fleet-redis"
    (tmp_path / "keys").write_text(f"{CLIENT_KEY} alpha\n{admin} ops role=admin\n")
    (tmp_path / "policy.yaml").write_text("base: {}\n")
    with emulator_in_thread(EmulatorConfig(api_keys=frozenset({UPSTREAM_KEY}))) as emulator:
        env = {
            "GATEWAY_API_KEYS_FILE": str(tmp_path / "keys"),
            "ANTHROPIC_API_KEY": UPSTREAM_KEY,
            "ANTHROPIC_BASE_URL": emulator.base_url,
            "GATEWAY_POLICY_FILE": str(tmp_path / "policy.yaml"),
            "GATEWAY_POLICY_RELOAD_S": "0.2",
            "GATEWAY_SESSION_STORE": redis.url,
        }
        asyncio.run(_flush(redis))
        body = {
            "model": "claude-sonnet-4-5",
            "max_tokens": 8,
            "messages": [{"role": "user", "content": "hi"}],
        }
        with (
            serve_process(env, tmp_path / "a.log") as first,
            serve_process(env, tmp_path / "b.log") as second,
        ):

            def status(url: str) -> int:
                response = requests.post(
                    url + "/v1/messages", json=body, headers={"x-api-key": CLIENT_KEY}, timeout=10
                )
                return response.status_code

            assert status(second.base_url) == 200
            change = {"scope": "user", "owner": "key:alpha", "period": "monthly", "limit_usd": 0}
            put = requests.put(
                first.base_url + "/v1/organizations/spend_limits",
                json=change,
                headers={"x-api-key": admin},
                timeout=10,
            )
            assert put.status_code == 200, put.text
            assert status(first.base_url) == 429  # at once where it was set
            deadline = time.monotonic() + 10
            while status(second.base_url) != 429:  # the other replica within its sync interval
                assert time.monotonic() < deadline
                time.sleep(0.1)
            listing = requests.get(
                second.base_url + "/v1/organizations/spend_limits", headers={"x-api-key": admin}, timeout=10
            ).json()["data"]
            assert {
                "scope": "user",
                "owner": "key:alpha",
                "period": "monthly",
                "limit_usd": 0.0,
                "source": "admin",
            }.items() <= listing[0].items()
