"""Recognising a client's retries by what it sends again, for clients whose header does not count.

Claude Code retries at the application level with a fresh SDK request each time: every one of its
attempts says ``x-stainless-retry-count: 0`` (measured with 2.1.197 and 2.1.332: 11 attempts on a
persistent 529, all with count 0, all with byte-identical bodies). So the gateway also remembers,
for a short window, the requests it has just answered with a retryable error, by a fingerprint of
the team and the client's body bytes (a hash; never the content). The same request arriving again
within the window is that client's next attempt. A success forgets the fingerprint; each failure
restarts its window. The memory is per process and bounded (least recently failed evicted first):
a retry routed to another replica counts as a first attempt there.

Fingerprints are computed only while some failure is remembered, so a healthy gateway never
hashes a body for this.
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
