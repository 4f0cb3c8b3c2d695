"""Where sign-in state lives: device grants, refresh-token families, revoked token ids, the
generated signing key and the CSRF key.

Two implementations of one interface (sqlite embedded, Redis for several replicas); ``replace``
is a byte-for-byte compare-and-set, so two replicas racing on one record cannot both win.

Details: docs/internals/gateway-fleet.md
"""

from __future__ import annotations

import abc
import asyncio
import os
import sqlite3
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar

import orjson

if TYPE_CHECKING:
    from redis.asyncio import Redis

Record = dict[str, Any]
T = TypeVar("T")
PURGE_EVERY_S: Final = 60.0
SQLITE_FILE: Final = "signin.sqlite3"
REDIS_PREFIX: Final = "switchyard:signin:"


def _dump(record: Record) -> bytes:
    return orjson.dumps(record, option=orjson.OPT_SORT_KEYS)


def _load(value: bytes | str) -> Record:
    loaded: Record = orjson.loads(value)
    return loaded


class SigninStore(abc.ABC):
    """JSON records by (kind, key) with an absolute expiry (Unix seconds), and the jti denylist."""

    shared: bool = False  # other replicas write to it too (the denylist must be re-read)

    @abc.abstractmethod
    async def get(self, kind: str, key: str) -> Record | None: ...

    @abc.abstractmethod
    async def put(self, kind: str, key: str, record: Record, expires_at: float) -> None: ...

    @abc.abstractmethod
    async def put_if_absent(self, kind: str, key: str, record: Record, expires_at: float | None) -> Record:
        """Store ``record`` unless one is there; return whichever is stored."""

    @abc.abstractmethod
    async def take(self, kind: str, key: str) -> Record | None:
        """Remove and return the record, atomically (single use)."""

    @abc.abstractmethod
    async def replace(self, kind: str, key: str, expected: Record, record: Record, expires_at: float) -> bool:
        """Store ``record`` only if ``expected`` is what is stored now."""

    @abc.abstractmethod
    async def delete(self, kind: str, key: str) -> None: ...

    @abc.abstractmethod
    async def add_revoked(self, jti: str, expires_at: float) -> None: ...

    @abc.abstractmethod
    async def revoked(self) -> dict[str, float]:
        """Every revoked access-token id not yet expired, with its expiry."""

    async def close(self) -> None:
        return None


class SqliteSigninStore(SigninStore):
    def __init__(self, directory: Path | None, clock: Callable[[], float] = time.time) -> None:
        target = ":memory:" if directory is None else str(directory / SQLITE_FILE)
        if directory is not None:  # it holds the IdP's refresh tokens: readable by this user only
            os.close(os.open(target, os.O_CREAT | os.O_RDWR, 0o600))
        self._db = sqlite3.connect(target, isolation_level=None, check_same_thread=False)
        if directory is not None:
            self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS records (kind TEXT NOT NULL, key TEXT NOT NULL, value BLOB NOT NULL, "
            "expires_at REAL, PRIMARY KEY (kind, key))"
        )
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS revoked (jti TEXT PRIMARY KEY, expires_at REAL NOT NULL)"
        )
        self._clock = clock
        self._purged_at = clock()

    def _maybe_purge(self, now: float) -> None:
        if now - self._purged_at < PURGE_EVERY_S:
            return
        self._purged_at = now
        self._db.execute("DELETE FROM records WHERE expires_at IS NOT NULL AND expires_at <= ?", (now,))
        self._db.execute("DELETE FROM revoked WHERE expires_at <= ?", (now,))

    def _row(self, kind: str, key: str) -> bytes | None:
        now = self._clock()
        self._maybe_purge(now)
        row = self._db.execute(
            "SELECT value FROM records WHERE kind = ? AND key = ? AND (expires_at IS NULL OR expires_at > ?)",
            (kind, key, now),
        ).fetchone()
        return None if row is None else bytes(row[0])

    async def get(self, kind: str, key: str) -> Record | None:
        value = self._row(kind, key)
        return None if value is None else _load(value)

    async def put(self, kind: str, key: str, record: Record, expires_at: float) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO records (kind, key, value, expires_at) VALUES (?, ?, ?, ?)",
            (kind, key, _dump(record), expires_at),
        )

    async def put_if_absent(self, kind: str, key: str, record: Record, expires_at: float | None) -> Record:
        existing = await self.get(kind, key)
        if existing is not None:
            return existing
        self._db.execute(
            "INSERT OR REPLACE INTO records (kind, key, value, expires_at) VALUES (?, ?, ?, ?)",
            (kind, key, _dump(record), expires_at),
        )
        return record

    async def take(self, kind: str, key: str) -> Record | None:
        value = self._row(kind, key)
        if value is None:
            return None
        self._db.execute("DELETE FROM records WHERE kind = ? AND key = ?", (kind, key))
        return _load(value)

    async def replace(self, kind: str, key: str, expected: Record, record: Record, expires_at: float) -> bool:
        cursor = self._db.execute(
            "UPDATE records SET value = ?, expires_at = ? WHERE kind = ? AND key = ? AND value = ? "
            "AND (expires_at IS NULL OR expires_at > ?)",
            (_dump(record), expires_at, kind, key, _dump(expected), self._clock()),
        )
        return cursor.rowcount == 1

    async def delete(self, kind: str, key: str) -> None:
        self._db.execute("DELETE FROM records WHERE kind = ? AND key = ?", (kind, key))

    async def add_revoked(self, jti: str, expires_at: float) -> None:
        self._db.execute("INSERT OR REPLACE INTO revoked (jti, expires_at) VALUES (?, ?)", (jti, expires_at))

    async def revoked(self) -> dict[str, float]:
        rows = self._db.execute("SELECT jti, expires_at FROM revoked WHERE expires_at > ?", (self._clock(),))
        return {str(jti): float(expires_at) for jti, expires_at in rows}

    async def close(self) -> None:
        self._db.close()


_REPLACE_SCRIPT: Final = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PXAT', ARGV[3])
  return 1
end
return 0
"""


class StoreUnavailable(Exception):
    """The shared sign-in store (Redis) failed or did not answer in time (the message names how,
    never the URL): the endpoint answers 503, the denylist keeps its last list."""


class RedisSigninStore(SigninStore):
    shared = True

    def __init__(self, client: Redis, timeout_s: float) -> None:
        self._redis = client
        self._replace = client.register_script(_REPLACE_SCRIPT)
        self._timeout_s = timeout_s

    @classmethod
    def from_url(cls, url: str, timeout_s: float) -> RedisSigninStore:
        """A store whose every call is bounded: ``timeout_s`` per socket operation (connect, command),
        twice that per call."""
        from gateway.redis_link import redis_client

        return cls(redis_client(url, timeout_s), timeout_s)

    async def _call(self, call: Awaitable[T]) -> T:
        try:
            async with asyncio.timeout(self._timeout_s * 2):
                return await call
        except Exception as exc:  # any Redis or network failure, or the bound
            raise StoreUnavailable(f"the sign-in store (Redis) failed: {type(exc).__name__}") from None

    @staticmethod
    def _key(kind: str, key: str) -> str:
        return f"{REDIS_PREFIX}{kind}:{key}"

    async def get(self, kind: str, key: str) -> Record | None:
        value = await self._call(self._redis.get(self._key(kind, key)))
        return None if value is None else _load(value)

    async def put(self, kind: str, key: str, record: Record, expires_at: float) -> None:
        await self._call(self._redis.set(self._key(kind, key), _dump(record), pxat=int(expires_at * 1000)))

    async def put_if_absent(self, kind: str, key: str, record: Record, expires_at: float | None) -> Record:
        pxat = None if expires_at is None else int(expires_at * 1000)
        created = await self._call(self._redis.set(self._key(kind, key), _dump(record), nx=True, pxat=pxat))
        if created:
            return record
        existing = await self.get(kind, key)
        return record if existing is None else existing

    async def take(self, kind: str, key: str) -> Record | None:
        value = await self._call(self._redis.getdel(self._key(kind, key)))
        return None if value is None else _load(value)

    async def replace(self, kind: str, key: str, expected: Record, record: Record, expires_at: float) -> bool:
        done = await self._call(
            self._replace(keys=[self._key(kind, key)], args=[_dump(expected), _dump(record), int(expires_at * 1000)])
        )
        return bool(done)

    async def delete(self, kind: str, key: str) -> None:
        await self._call(self._redis.delete(self._key(kind, key)))

    async def add_revoked(self, jti: str, expires_at: float) -> None:
        await self._call(self._redis.zadd(f"{REDIS_PREFIX}revoked", {jti: expires_at}))

    async def revoked(self) -> dict[str, float]:
        key = f"{REDIS_PREFIX}revoked"
        now = time.time()

        async def read() -> Any:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.zremrangebyscore(key, "-inf", now)
                pipe.zrangebyscore(key, now, "+inf", withscores=True)
                return await pipe.execute()

        _, rows = await self._call(read())
        return {(jti.decode() if isinstance(jti, bytes) else str(jti)): float(score) for jti, score in rows}

    async def close(self) -> None:
        await self._redis.aclose()
