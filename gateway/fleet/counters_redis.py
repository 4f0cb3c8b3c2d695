"""Spend and rate counters shared by every replica in Redis (``GATEWAY_SESSION_STORE=redis://...``).

``admit`` and ``record`` are one Lua script each, with the semantics of
:mod:`gateway.fleet.counters`; single Redis, not Cluster. ``admit`` fails within a bound
(:class:`CountersUnavailable`); ``record`` runs off the request path.

Details: docs/internals/gateway-fleet.md
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar

from gateway.fleet.counters import (
    STALE_SLOT_S,
    Admitted,
    Checks,
    Counters,
    CountersUnavailable,
    Refused,
)
from gateway.redis_link import RedisLink, RedisUnavailable

log = logging.getLogger("switchyard.fleet.counters")
T = TypeVar("T")
CAPS_KEY: Final = "switchyard:fleet:caps"  # hash: "<scope> <owner> <period>" -> USD or "none"
RECORD_TIMEOUT_S: Final = 5.0

ADMIT: Final = """
local now, token = tonumber(ARGV[1]), ARGV[2]
local ns, nr, nsl = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local stale = tonumber(ARGV[6])
local a = 7
local out = {'ok', 0, '0'}
for i = 1, ns do
  local used = tonumber(redis.call('GET', KEYS[i]) or '0')
  if used >= tonumber(ARGV[a]) then return {'spend', i - 1, '0'} end
  out[#out + 1] = string.format('%.0f', used)
  a = a + 1
end
local tats = {}
for i = 1, nr do
  local interval, tolerance, cost = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  a = a + 3
  local tat = tonumber(redis.call('GET', KEYS[ns + i]) or '0')
  if tat < now then tat = now end
  local new = tat + cost * interval
  local excess = new - now - tolerance
  if excess > 1e-9 then return {'rate', i - 1, string.format('%.6f', excess)} end
  tats[i] = {new, cost}
end
for i = 1, nsl do
  local key = KEYS[ns + nr + i]
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now - stale)
  if redis.call('ZCARD', key) >= tonumber(ARGV[a + i - 1]) then return {'slot', i - 1, '0'} end
end
for i = 1, nr do
  if tats[i][2] > 0 then
    local ms = math.max(1, math.ceil((tats[i][1] - now) * 1000))
    redis.call('SET', KEYS[ns + i], string.format('%.6f', tats[i][1]), 'PX', ms)
  end
end
for i = 1, nsl do
  local key = KEYS[ns + nr + i]
  redis.call('ZADD', key, now, token)
  redis.call('EXPIRE', key, math.ceil(stale))
end
return out
"""

RECORD: Final = """
local ns, nr, nsl = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local micros, tokens, now, token = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7]
local a = 8
for i = 1, ns do
  if micros > 0 then
    redis.call('INCRBY', KEYS[i], ARGV[4])
    redis.call('EXPIREAT', KEYS[i], ARGV[a])
  end
  a = a + 1
end
for i = 1, nr do
  if tokens > 0 then
    local key = KEYS[ns + i]
    local tat = tonumber(redis.call('GET', key) or '0')
    if tat < now then tat = now end
    local new = tat + tokens * tonumber(ARGV[a])
    redis.call('SET', key, string.format('%.6f', new), 'PX', math.max(1, math.ceil((new - now) * 1000)))
  end
  a = a + 1
end
for i = 1, nsl do redis.call('ZREM', KEYS[ns + nr + i], token) end
return 1
"""


class RedisCounters(Counters):
    """The counters in Redis through the replica's link (:mod:`gateway.redis_link`): its client,
    whose every socket operation is bounded, and its outage back-off, shared with the session store
    and the upstream state, during which the counters are unavailable at once instead of after a
    timeout per request."""

    def __init__(self, link: RedisLink) -> None:
        self._link = link
        self._redis: Any = link.redis
        self._timeout_s = link.timeout_s
        self._admit = self._redis.register_script(ADMIT)
        self._record = self._redis.register_script(RECORD)
        self._pending: set[asyncio.Task[None]] = set()
        self._record_failing = False

    async def _bounded(self, action: str, call: Callable[[], Awaitable[T]]) -> T:
        """``call()`` through the link (bounded, in its back-off); ``CountersUnavailable`` if not."""
        try:
            return await self._link.call(action, call)
        except RedisUnavailable as exc:
            raise CountersUnavailable(str(exc)) from None

    async def admit(self, now: float, checks: Checks, token: str) -> Admitted | Refused:
        spend, rates, slots = checks.spend, checks.rates, checks.slots
        keys = [*checks.spend_keys, *(r.key for r in rates), *(s.key for s in slots)]
        args: list[str | int | float] = [repr(now), token, len(spend), len(rates), len(slots), STALE_SLOT_S]
        args.extend(checks.spend_limits)
        for rate in rates:
            args.extend((repr(rate.interval_s), repr(rate.tolerance_s), rate.cost))
        args.extend(s.limit for s in slots)
        reply = await self._bounded("counters admit", lambda: self._admit(keys=keys, args=args))
        verdict = _text(reply[0])
        if verdict == "ok":
            return Admitted([int(_text(value)) for value in reply[3:]])
        return Refused(verdict, int(reply[1]), float(_text(reply[2])))

    def record(self, now: float, checks: Checks, micros: int, tokens: int, token: str) -> None:
        if micros <= 0 and tokens <= 0 and not checks.slots:
            return
        task = asyncio.get_running_loop().create_task(self._write(now, checks, micros, tokens, token))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _write(self, now: float, checks: Checks, micros: int, tokens: int, token: str) -> None:
        charged, token_rates, slots = checks.charged, checks.token_rates, checks.slots
        keys = [*checks.charged_keys, *(r.key for r in token_rates), *(s.key for s in slots)]
        args: list[str | int | float] = [len(charged), len(token_rates), len(slots)]
        args.extend((micros, tokens, repr(now), token))
        args.extend(c.expire_at for c in charged)
        args.extend(repr(r.interval_s) for r in token_rates)
        try:  # off the request path: a slow Redis may take its time rather than lose the spend
            if not self._link.available():
                raise CountersUnavailable("Redis in its back-off")
            async with asyncio.timeout(max(RECORD_TIMEOUT_S, self._timeout_s * 2)):
                await self._record(keys=keys, args=args)
        except Exception as exc:
            if not isinstance(exc, CountersUnavailable):
                self._link.failed("spend record", exc)
            if not self._record_failing:
                log.warning(
                    "fleet counters: recording spend in Redis failed (%s); it is lost", type(exc).__name__
                )
            self._record_failing = True
            return
        self._record_failing = False

    async def read_spend(self, keys: tuple[str, ...]) -> list[int]:
        if not keys:
            return []
        values = await self._bounded("spend read", lambda: self._redis.mget(keys))
        return [int(value) if value is not None else 0 for value in values]

    shared = True

    async def shared_caps(self) -> dict[str, str] | None:
        raw = await self._bounded("caps read", lambda: self._redis.hgetall(CAPS_KEY))
        return {_text(name): _text(value) for name, value in raw.items()}

    async def share_cap(self, field: str, value: str) -> None:
        await self._bounded("cap write", lambda: self._redis.hset(CAPS_KEY, field, value))

    async def set_spend(self, key: str, micros: int, expire_at: int) -> None:
        await self._bounded("spend write", lambda: self._redis.set(key, micros, exat=expire_at))

    async def flush(self) -> None:
        """Wait for the background writes in progress (tests, shutdown)."""
        if self._pending:
            await asyncio.gather(*list(self._pending), return_exceptions=True)

    async def close(self) -> None:
        await self.flush()  # (the link is the gateway's to close, after every user of it)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
