"""Breakers shared by every replica through Redis: one replica's failures open the circuit for all.

Keys per upstream (``<name>`` is the upstream's name from the file)::

    switchyard:upstreams:breaker:<name>:failures    sorted set: one member per failure, scored by time
    switchyard:upstreams:breaker:<name>:open_until  string: wall-clock seconds the circuit is open until

A failure is counted in the sorted set (members older than the window are dropped in the same
transaction); the replica whose failure reaches the threshold writes ``open_until``. ``sync``
reads every ``open_until`` (one ``MGET``) at most every ``sync_s`` seconds, so a replica that saw
no failure itself skips the upstream as soon as another replica opened its circuit, and probes it
when it half-opens; a success in half-open deletes ``open_until`` for everybody.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from gateway.upstreams.breaker import BreakerBoard, BreakerState, _Circuit
from gateway.upstreams.config import BreakerOptions
from gateway.upstreams.shared import KEY_PREFIX, SharedRedis


def breaker_keys(name: str) -> tuple[str, str]:
    base = f"{KEY_PREFIX}breaker:{name}"
    return base + ":failures", base + ":open_until"


class RedisBreakerBoard(BreakerBoard):
    def __init__(
        self,
        names: Iterable[str],
        options: BreakerOptions,
        shared: SharedRedis,
        *,
        sync_s: float = 1.0,
        clock: Callable[[], float] = time.time,
        on_change: Callable[[str, BreakerState], None] | None = None,
    ) -> None:
        self._names = tuple(names)
        super().__init__(self._names, options, clock=clock, on_change=on_change)
        self._shared = shared
        self._sync_s = sync_s
        self._synced_at = float("-inf")
        self._ttl_ms = int((options.window_s + options.open_s) * 1000) + 60_000

    async def _count_failure(self, name: str, circuit: _Circuit, now: float) -> int:
        local = await super()._count_failure(name, circuit, now)
        failures, _ = breaker_keys(name)

        async def count() -> Any:
            pipe = self._shared.redis.pipeline(transaction=True)
            pipe.zadd(failures, {f"{now!r}:{uuid.uuid4().hex[:8]}": now})
            pipe.zremrangebyscore(failures, "-inf", now - self.options.window_s)
            pipe.zcard(failures)
            pipe.pexpire(failures, self._ttl_ms)
            return await pipe.execute()

        replies = await self._shared.run("breaker failure", count)
        return local if replies is None else max(local, int(replies[2]))

    async def _shared_open(self, name: str, until: float) -> None:
        failures, open_until = breaker_keys(name)

        async def write() -> Any:
            pipe = self._shared.redis.pipeline(transaction=True)
            pipe.set(open_until, repr(until), px=self._ttl_ms)
            pipe.delete(failures)
            return await pipe.execute()

        await self._shared.run("breaker open", write)

    async def _shared_close(self, name: str) -> None:
        failures, open_until = breaker_keys(name)
        await self._shared.run("breaker close", lambda: self._shared.redis.delete(open_until, failures))

    async def sync(self) -> None:
        now = time.monotonic()
        if now - self._synced_at < self._sync_s:
            return
        self._synced_at = now
        keys = [breaker_keys(name)[1] for name in self._names]
        values = await self._shared.run("breaker sync", lambda: self._shared.redis.mget(keys))
        if values is None:
            return
        for name, value in zip(self._names, values, strict=True):
            try:
                until = None if value is None else float(value)
            except ValueError:
                until = None
            self._adopt(name, until)
