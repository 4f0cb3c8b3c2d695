"""A model of Anthropic's prompt cache.

* **Key.** A cache entry is keyed by the model's canonical id and a chained SHA-256 over the
  flattened prompt blocks (tools → system → messages) up to and including one block. The hashed
  bytes exclude ``cache_control`` keys, so moving a marker does not change a prefix's hash, and
  exclude Claude Code's per-request billing-header system block (see :mod:`.prompt`).
* **Lookup.** For each breakpoint, the cache is checked at the breakpoint and at up to
  ``lookback_blocks`` (default 20) earlier block boundaries; the longest live entry found over
  all breakpoints is the hit and its prefix is ``cache_read_input_tokens``.
* **Write.** Entries are stored at every breakpoint after the hit; the tokens from the hit to the
  last breakpoint are ``cache_creation_input_tokens``, each segment attributed to the TTL of the
  breakpoint that ends it (``ephemeral_5m`` / ``ephemeral_1h``). Only breakpoint prefixes are
  stored, as the real API does: a later request finds them through its look-back window, so a
  breakpoint that moves further than the window past the last write misses.
* **Minimum length.** A prefix shorter than the model's minimum cacheable length is silently not
  cached (neither read nor written).
* **TTL.** 5 minutes or 1 hour on the injectable clock; a read refreshes every entry it used.
* Tokens after the last breakpoint, the billing block and the request overhead are
  ``input_tokens``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
from dataclasses import dataclass

from .catalog import ModelSpec
from .clock import Clock
from .prompt import TTL_SECONDS, FlatPrompt, Ttl

DEFAULT_LOOKBACK_BLOCKS = 20


@dataclass(frozen=True, slots=True)
class CacheUsage:
    """How one request's input tokens split between uncached input, cache reads and writes."""

    input_tokens: int
    cache_read_input_tokens: int = 0
    cache_creation_5m: int = 0
    cache_creation_1h: int = 0

    @property
    def cache_creation_input_tokens(self) -> int:
        return self.cache_creation_5m + self.cache_creation_1h

    @property
    def total_input_tokens(self) -> int:
        """``input + cache_creation + cache_read``: what ``count_tokens`` reports."""
        return self.input_tokens + self.cache_read_input_tokens + self.cache_creation_input_tokens


@dataclass(slots=True)
class CacheEntry:
    """One cached prefix."""

    model: str
    prefix_blocks: int
    prefix_tokens: int
    ttl: Ttl
    written_at: float
    expires_at: float
    reads: int = 0


@dataclass(frozen=True, slots=True)
class _Probe:
    """The hashes and cumulative token counts of every prefix of one prompt."""

    hashes: tuple[bytes, ...]
    cumulative: tuple[int, ...]


class PromptCache:
    """In-memory prompt cache shared by every request an emulator serves (thread-safe)."""

    def __init__(self, clock: Clock, *, lookback_blocks: int = DEFAULT_LOOKBACK_BLOCKS) -> None:
        self._clock = clock
        self._lookback = lookback_blocks
        self._entries: dict[tuple[str, bytes], CacheEntry] = {}
        self._lock = threading.Lock()

    @property
    def lookback_blocks(self) -> int:
        return self._lookback

    def apply(self, model: ModelSpec, prompt: FlatPrompt, *, write: bool = True) -> CacheUsage:
        """Look the prompt up, write what it asks to cache (unless ``write`` is false), split usage."""
        breakpoints = prompt.breakpoints
        probe = self._probe(model.id, prompt)
        eligible = [b for b in breakpoints if probe.cumulative[b] >= model.min_cacheable_tokens]
        total = prompt.total_tokens
        if not eligible:
            return CacheUsage(input_tokens=total)
        with self._lock:
            now = self._clock.time()
            self._purge(now)
            hit = self._longest_hit(model.id, probe, eligible)
            read = probe.cumulative[hit] if hit >= 0 else 0
            creation: dict[Ttl, int] = {"5m": 0, "1h": 0}
            previous = hit
            for b in eligible:
                if b <= hit:
                    continue
                marker = prompt.blocks[b].marker
                assert marker is not None
                creation[marker.ttl] += probe.cumulative[b] - (
                    probe.cumulative[previous] if previous >= 0 else 0
                )
                previous = b
                if write:
                    self._entries[(model.id, probe.hashes[b])] = CacheEntry(
                        model=model.id,
                        prefix_blocks=b + 1,
                        prefix_tokens=probe.cumulative[b],
                        ttl=marker.ttl,
                        written_at=now,
                        expires_at=now + TTL_SECONDS[marker.ttl],
                    )
            if write and hit >= 0:
                self._refresh(model.id, probe, [*(b for b in eligible if b < hit), hit], now)
        uncached = total - read - creation["5m"] - creation["1h"]
        return CacheUsage(uncached, read, creation["5m"], creation["1h"])

    def _longest_hit(self, model_id: str, probe: _Probe, eligible: list[int]) -> int:
        hit = -1
        for b in eligible:
            for position in range(b, max(-1, b - self._lookback - 1), -1):
                if position <= hit:
                    break
                if (model_id, probe.hashes[position]) in self._entries:
                    hit = position
                    break
        return hit

    def _refresh(self, model_id: str, probe: _Probe, positions: list[int], now: float) -> None:
        for position in positions:
            entry = self._entries.get((model_id, probe.hashes[position]))
            if entry is not None:
                entry.expires_at = max(entry.expires_at, now + TTL_SECONDS[entry.ttl])
                entry.reads += 1

    def _purge(self, now: float) -> None:
        expired = [key for key, entry in self._entries.items() if entry.expires_at <= now]
        for key in expired:
            del self._entries[key]

    @staticmethod
    def _probe(model_id: str, prompt: FlatPrompt) -> _Probe:
        hashes: list[bytes] = []
        cumulative: list[int] = []
        digest = hashlib.sha256(model_id.encode()).digest()
        running = 0
        for block in prompt.blocks:
            digest = hashlib.sha256(digest + block.key).digest()
            running += block.tokens
            hashes.append(digest)
            cumulative.append(running)
        return _Probe(tuple(hashes), tuple(cumulative))

    def entries(self) -> list[CacheEntry]:
        """The live entries (copies), oldest write first."""
        with self._lock:
            self._purge(self._clock.time())
            return sorted(
                (dataclasses.replace(e) for e in self._entries.values()), key=lambda e: e.written_at
            )

    def clear(self) -> None:
        """Forget every entry."""
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        with self._lock:
            self._purge(self._clock.time())
            return len(self._entries)
