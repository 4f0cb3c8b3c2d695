"""Recognising a client's retries by what it sends again, for clients whose header does not count.

Remembers a hash of team and body (never the content) for requests just answered with a
retryable error; bounded, per process. Nothing is hashed while no failure is remembered.

Details: docs/internals/gateway.md
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from gateway.providers.base import ClientRequest

DEFAULT_MAX_ENTRIES: Final = 10_000


@dataclass(frozen=True, slots=True)
class Recalled:
    """What the gateway remembers of a request's recent failed attempts."""

    failures: int  # the client's attempts that failed
    upstream_attempts: int  # the upstream attempts they cost
    overloads: int  # consecutive 529s at the end of the last one


@dataclass(slots=True)
class _Entry:
    recalled: Recalled
    expires_at: float


class RetryMemory:
    """Recent retryable failures, by request fingerprint."""

    def __init__(
        self,
        window_s: float,
        *,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.window_s = window_s
        self.max_entries = max_entries
        self._clock = clock
        self._entries: OrderedDict[bytes, _Entry] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def _expire(self) -> None:
        now = self._clock()
        while self._entries:
            key, entry = next(iter(self._entries.items()))
            if entry.expires_at > now:
                break
            del self._entries[key]

    def recall(self, key: RequestKey) -> Recalled | None:
        """This request's recent failures (``None`` when it is new or the window has passed)."""
        if not self._entries:
            return None
        self._expire()
        entry = self._entries.get(key.digest) if self._entries else None
        return None if entry is None else entry.recalled

    def failed(self, key: RequestKey, upstream_attempts: int, overloads: int) -> None:
        """Record a final retryable error that cost ``upstream_attempts``."""
        if self.window_s <= 0:
            return
        self._expire()
        digest = key.digest
        entry = self._entries.pop(digest, None)
        before = Recalled(0, 0, 0) if entry is None else entry.recalled
        recalled = Recalled(before.failures + 1, before.upstream_attempts + upstream_attempts, overloads)
        self._entries[digest] = _Entry(recalled, self._clock() + self.window_s)  # newest last
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def succeeded(self, key: RequestKey) -> None:
        if self._entries:
            self._entries.pop(key.digest, None)


class RequestKey:
    """A request's fingerprint, hashed on first use only."""

    def __init__(self, team: str, request: ClientRequest) -> None:
        self._team = team
        self._request = request
        self._digest: bytes | None = None

    @property
    def digest(self) -> bytes:
        if self._digest is None:
            hasher = hashlib.blake2b(digest_size=16)
            for part in (self._team.encode(), self._request.operation.value.encode()):
                hasher.update(part)
                hasher.update(b"\0")
            hasher.update(self._request.body)
            self._digest = hasher.digest()
        return self._digest
