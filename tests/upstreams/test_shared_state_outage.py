"""Replicas sharing upstream state through Redis keep failing over while Redis hangs, and share again
once it answers.

Two ``switchyard serve`` processes (first party as the primary, Foundry second) share a real,
password-protected redis-server. Redis (also holding the
policy's spend counters) is frozen mid-run (``SIGSTOP``: connections stay open, nothing
answers, the worst case for a client without timeouts): a session placed on the primary must still
move when the primary refuses (each replica on its own view), within Redis' socket timeout rather
than hanging on it; the failures are counted and logged without the Redis password. Redis is thawed
(``SIGCONT``): once a replica's back-off has passed, a move one replica makes is what the other one
follows.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from emulators.upstreams import EmulatedUpstream, emulated_upstream
from tests.support.redis_server import RedisServer, running_redis
from tests.support.serve_process import GatewayProcess, serve_process
from tests.support.threaded import LoopThread
from tests.upstreams.test_shared_state import _metric, _turn, replicas_env

pytestmark = pytest.mark.timeout(120)
PASSWORD = "redis-pw-9f3c1e"


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    with running_redis(tmp_path, password=PASSWORD) as server:
        yield server


def _served(upstream: EmulatedUpstream) -> int:
    return sum(1 for r in upstream.emulator.requests if r.method == "POST")


def _log_with(gateway: GatewayProcess, text: str) -> str:
    """The process's log once it holds ``text`` (lines reach the file within the writer's interval)."""
    deadline = time.monotonic() + 5
    while text not in (log := gateway.stderr()):
        assert time.monotonic() < deadline, f"{text!r} never logged: {log[-2000:]}"
        time.sleep(0.05)
    return log


def _placement(server: RedisServer, session: str) -> str | None:
    """The upstream Redis holds for ``session``'s route slot (any team), or ``None``."""

    async def read() -> str | None:
        client = server.client()
        try:
            keys = await client.keys(f"switchyard:upstreams:placement:*:{session}")
            keys = [k for k in keys if b":h:" not in k]  # the route slot (not the conversation's)
            if not keys:
                return None
            value = await client.hget(keys[0], "upstream")
            return value.decode() if value is not None else None
        finally:
            await client.aclose()

    return asyncio.run(read())


def test_replicas_fail_over_on_their_own_while_redis_is_down_and_share_again_after(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    thread = LoopThread()
    try:
        primary = thread.enter(emulated_upstream("anthropic", tmp_path))
        second = thread.enter(emulated_upstream("foundry", tmp_path))
        sections = {  # a breaker out of reach: each move below is the request's own
            "breaker": {"failures": 1000, "window_s": 60, "open_s": 120, "sync_s": 0},
            "failover": {"same_upstream_retries": 0},
        }
        policy = tmp_path / "policy.yaml"  # spend counters in the same Redis (fail open while it hangs)
        policy.write_text("base: {spend_caps: {daily_usd: 1000}}\n")
        env = replicas_env(
            tmp_path,
            [primary, second],
            redis_server.url,
            sections,
            GATEWAY_SESSION_STORE_TIMEOUT_S="0.5",
            GATEWAY_POLICY_FILE=str(policy),
        )
        with (
            serve_process(env, tmp_path / "a.log") as a,
            serve_process(env, tmp_path / "b.log") as b,
        ):
            _turn(a, "before", "one")
            assert _placement(redis_server, "before") == "primary"

            assert redis_server.process is not None
            os.kill(redis_server.process.pid, signal.SIGSTOP)
            primary.emulator.set_fault("fail_first=1000000:529,retry_after_ms=1")
            for gateway in (b, a):  # neither can read or write the placement: each moves on its own
                started = time.monotonic()
                _turn(gateway, "before", "two")
                took = time.monotonic() - started
                # one timeout (0.5 s) for the whole request, counters, latches, breakers and placements
                # alike (one back-off for all of them): no hang, and no timeout per user of Redis
                assert took < 1.5
            assert (_served(primary), _served(second)) == (3, 2)
            for gateway in (a, b):
                errors = _metric(gateway, "gateway_session_store_errors_total", "")
                assert errors is not None and errors >= 1
                log = _log_with(gateway, "session store unavailable")
                assert PASSWORD not in log

            os.kill(redis_server.process.pid, signal.SIGCONT)
            primary.emulator.set_fault("")
            # each replica asks Redis again once its back-off (0.5 s, doubling) has passed: place new
            # sessions through A until one is recorded there
            deadline = time.monotonic() + 40
            session = ""
            for attempt in range(400):
                session = f"after-{attempt}"
                _turn(a, session, "three")
                if _placement(redis_server, session) == "primary":
                    break
                assert time.monotonic() < deadline, "A never wrote a placement to Redis again"
                time.sleep(0.25)
            primary.emulator.set_fault("fail_first=1000000:529,retry_after_ms=1")
            deadline = time.monotonic() + 40
            while _placement(redis_server, session) != "foundry":  # B moves it (once its back-off ends)
                assert time.monotonic() < deadline, "B never shared its move through Redis"
                _turn(b, session, "four")
                time.sleep(0.25)
            before = (_served(primary), _served(second))
            _turn(a, session, "five")  # A follows B's move: straight to foundry, the primary untried
            assert (_served(primary), _served(second)) == (before[0], before[1] + 1)
    finally:
        thread.close()
