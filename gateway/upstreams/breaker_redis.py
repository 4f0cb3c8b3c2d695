"""Breakers shared by every replica through Redis: one replica's failures open the circuit for all,
and the half-open probe slots are the fleet's (``half_open_probes`` in all, not per replica).

Keys per upstream: ``switchyard:upstreams:breaker:<name>:failures`` (sorted set),
``...:open_until`` (wall-clock seconds), ``...:probes`` (sorted set of the slots taken, scored
by their expiry) and ``...:closed_at`` (when the fleet last closed it). ``sync`` reads every
``open_until`` and ``closed_at`` (one ``MGET``) at most every ``sync_s``; a
probe slot is taken by one Lua script (one round trip) and expires after ``probe_slot_s``. A
circuit opened or closed while Redis was away (or open, and lost by a Redis restart) is written back
when Redis answers again, unless the fleet's record is newer (a replica keeps what it learnt).

Details: docs/internals/gateway-upstreams.md
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any, Final, Literal

from gateway.redis_link import RedisLink
from gateway.upstreams.breaker import BreakerBoard, BreakerState, _Circuit
from gateway.upstreams.config import BreakerOptions
from gateway.upstreams.shared import KEY_PREFIX

# KEYS: probes, open_until; ARGV: now, slot expiry, slots, token, key ttl (ms).
# 1: taken; 0: every slot is taken; -1: closed (no open_until); a string: open again until then.
TAKE_PROBE: Final = """
local open_until = redis.call('GET', KEYS[2])
if not open_until then return -1 end
if tonumber(open_until) > tonumber(ARGV[1]) then return open_until end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
"""


def breaker_keys(name: str) -> tuple[str, str]:
    base = f"{KEY_PREFIX}breaker:{name}"
    return base + ":failures", base + ":open_until"


def probes_key(name: str) -> str:
    return f"{KEY_PREFIX}breaker:{name}:probes"


def closed_key(name: str) -> str:
    """When the fleet last closed the circuit (a close is otherwise only a missing ``open_until``)."""
    return f"{KEY_PREFIX}breaker:{name}:closed_at"


class RedisBreakerBoard(BreakerBoard):
    def __init__(
        self,
        names: Iterable[str],
        options: BreakerOptions,
        shared: RedisLink,
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
        self._take_script: Any = shared.redis.register_script(TAKE_PROBE)
        self._returns: set[asyncio.Task[Any]] = set()
        # circuits opened or closed here while Redis was away, by name: (open_until or None for
        # closed, when): told to the fleet once Redis answers again, unless the fleet moved on since
        self._unsynced: dict[str, tuple[float | None, float]] = {}

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
            pipe.delete(failures, probes_key(name))
            return await pipe.execute()

        self._written(name, await self._shared.run("breaker open", write), until)

    async def _shared_close(self, name: str) -> None:
        failures, open_until = breaker_keys(name)
        now = self.clock()

        async def write() -> Any:
            pipe = self._shared.redis.pipeline(transaction=True)
            pipe.delete(open_until, failures, probes_key(name))
            pipe.set(closed_key(name), repr(now), px=self._ttl_ms)
            return await pipe.execute()

        self._written(name, await self._shared.run("breaker close", write), None)

    def _written(self, name: str, reply: Any, open_until: float | None) -> None:
        if reply is None:  # Redis is away: the fleet learns it when it is back (``_reconcile``)
            self._unsynced[name] = (open_until, self.clock())
        else:
            self._unsynced.pop(name, None)

    async def _reconcile(self, name: str, shared_until: float | None) -> bool:
        """Redis answers again and holds ``shared_until`` for a circuit this replica opened or
        closed while it was away: write this replica's state back if it is the newer one (the
        fleet did not open the circuit since). ``True`` if it was written back."""
        until, at = self._unsynced[name]
        circuit = self._circuits[name]
        if circuit.open_until != until:  # changed here since (and written, or unsynced anew)
            del self._unsynced[name]
            return False
        if until is None:  # closed here: stale if Redis's open period began before that
            newer = shared_until is not None and shared_until - self.options.open_s < at
        elif shared_until is not None:  # opened here, and in Redis: the period that ends later
            newer = shared_until < until
        else:  # opened here, closed in Redis (or never opened there): unless the fleet closed it since
            closed: Any = await self._shared.run("breaker sync", lambda: self._shared.redis.get(closed_key(name)))
            try:
                closed_at = None if closed is None else float(closed)
            except ValueError:
                closed_at = None
            newer = closed_at is None or closed_at < until - self.options.open_s
        if not newer:
            del self._unsynced[name]
            return False
        if until is None:
            await self._shared_close(name)
        else:
            await self._shared_open(name, until)
        return True

    async def _take_probe(self, name: str) -> Literal["taken", "refused", "closed"]:
        now = self.clock()
        token = uuid.uuid4().hex
        keys = [probes_key(name), breaker_keys(name)[1]]
        args = [repr(now), repr(now + self.options.probe_slot_s), self.options.half_open_probes, token]
        args.append(self._ttl_ms)
        reply = await self._shared.run("breaker probe", lambda: self._take_script(keys=keys, args=args))
        if reply is None:  # Redis is down: this replica's own count decides
            return "taken"
        if reply == -1 and name in self._unsynced and await self._reconcile(name, None):
            return "taken"  # opened here while Redis was away (now written back): a probe
        if isinstance(reply, bytes):  # open again (another replica's probe failed): skip it
            with contextlib.suppress(ValueError):
                self._adopt(name, float(reply))
            return "refused"
        if reply == 1:
            self._circuits[name].tokens.append(token)
            return "taken"
        return "closed" if reply == -1 else "refused"

    def _give_back(self, name: str) -> None:
        tokens = self._circuits[name].tokens
        if not tokens:
            return
        token = tokens.pop()

        async def give_back() -> None:  # off the request (it may be being cancelled); else it expires
            await self._shared.run("breaker probe", lambda: self._shared.redis.zrem(probes_key(name), token))

        task = asyncio.get_running_loop().create_task(give_back())
        self._returns.add(task)
        task.add_done_callback(self._returns.discard)

    async def close(self) -> None:
        if self._returns:
            await asyncio.gather(*self._returns, return_exceptions=True)

    async def sync(self) -> None:
        now = time.monotonic()
        if now - self._synced_at < self._sync_s:
            return
        self._synced_at = now
        keys = [breaker_keys(name)[1] for name in self._names] + [closed_key(name) for name in self._names]
        values = await self._shared.run("breaker sync", lambda: self._shared.redis.mget(keys))
        if values is None:
            return
        count = len(self._names)
        for name, value, closed in zip(self._names, values[:count], values[count:], strict=True):
            until, closed_at = _seconds(value), _seconds(closed)
            if name in self._unsynced and await self._reconcile(name, until):
                continue
            if until is None and self._lost(name, closed_at):  # open here: Redis lost it (restarted)
                await self._shared_open(name, self._circuits[name].open_until or self.clock())
                continue
            self._adopt(name, until)

    def _lost(self, name: str, closed_at: float | None) -> bool:
        """Whether Redis, holding no ``open_until`` for a circuit open here, lost it: no replica
        closed it since its open period began (``open_until`` outlives an open period)."""
        until = self._circuits[name].open_until
        if until is None or self.state(name) is not BreakerState.OPEN:
            return False
        return closed_at is None or closed_at < until - self.options.open_s


def _seconds(value: Any) -> float | None:
    try:
        return None if value is None else float(value)
    except ValueError:
        return None
