"""Cache-break detection: when an upstream reads less from the cache than the session's unchanged
prefix should have earned, say why.

The first segment that differs from the previous request of the same conversation names the break
(a fixed set of reason words, listed in the design document; they are metric labels). A session
may hold several conversations (Claude Code's side requests and sub-agents share its session id):
a request is compared with its own conversation's last request (``conversation_record``).

Details: docs/internals/gateway-cache.md
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gateway.cache.prefix import PrefixHashes
from gateway.streaming.usage import Usage

TTL_SECONDS = {"5m": 300.0, "1h": 3600.0}


class BreakReason(enum.StrEnum):
    FIRST_REQUEST = "first_request"
    MODEL_CHANGED = "model_changed"
    BETAS_CHANGED = "betas_changed"
    TOOLS_CHANGED = "tools_changed"
    SYSTEM_CHANGED = "system_changed"
    COMPACTION = "compaction"
    MESSAGES_EDITED = "messages_edited"
    TTL_EXPIRED = "ttl_expired"
    UNKNOWN = "unknown"
    UPSTREAM_CHANGED = "upstream_changed"  # the session moved to another upstream (issue 18)


@dataclass(frozen=True, slots=True)
class PreviousRequest:
    """What the session store remembers of the session's last request."""

    hashes: PrefixHashes
    at: float  # wall-clock seconds
    cached: int | None  # cache reads + writes it reported; None while unknown


@dataclass(frozen=True, slots=True)
class BreakRecord:
    """One cache break as a session keeps it (``GET /v1/sessions/{id}`` shows the last ones)."""

    at: float  # wall-clock seconds
    reason: str
    cache_read_input_tokens: int
    expected: int | None  # what the session's unchanged prefix should have read
    upstream_reason: str | None  # the upstream's own cache-miss reason, when it gives one

    def as_dict(self) -> dict[str, Any]:
        return {
            "at": self.at,
            "reason": self.reason,
            "cache_read_input_tokens": self.cache_read_input_tokens,
            "expected": self.expected,
            "upstream_reason": self.upstream_reason,
        }


def changed_segment(previous: PrefixHashes, current: PrefixHashes) -> BreakReason | None:
    """The first prefix segment that differs, or ``None`` when ``current`` extends ``previous``."""
    if previous.model != current.model:
        return BreakReason.MODEL_CHANGED
    if previous.betas != current.betas:
        return BreakReason.BETAS_CHANGED
    if previous.tools != current.tools:
        return BreakReason.TOOLS_CHANGED
    if previous.system != current.system:
        return BreakReason.SYSTEM_CHANGED
    shared = len(previous.messages)
    if shared and (len(current.messages) < shared or current.messages[shared - 1] != previous.messages[-1]):
        if current.first_message != previous.first_message and len(current.messages) < shared:
            return BreakReason.COMPACTION
        return BreakReason.MESSAGES_EDITED
    return None


def classify(
    previous: PreviousRequest | None, current: PrefixHashes, usage: Usage, now: float
) -> BreakReason | None:
    """Why this request read less from the cache than expected, or ``None`` if it did not."""
    if not current.ttls:
        return None  # no breakpoint: nothing was meant to be cached
    if previous is None:
        return BreakReason.FIRST_REQUEST if usage.cache_read_input_tokens == 0 else None
    expected = previous.cached
    if expected is None or expected == 0 or usage.cache_read_input_tokens >= expected:
        return None
    segment = changed_segment(previous.hashes, current)
    if segment is not None:
        return segment
    longest = max((TTL_SECONDS.get(t, 300.0) for t in previous.hashes.ttls), default=300.0)
    if now - previous.at > longest:
        return BreakReason.TTL_EXPIRED
    return BreakReason.UNKNOWN


def conversation_record(
    records: Sequence[PreviousRequest], current: PrefixHashes
) -> tuple[PreviousRequest | None, bool]:
    """The last request of ``current``'s conversation among a session's recent ones (most recent
    first), ``None`` for a new conversation. Best first: the same static system prompt and tools
    and first message (parallel sub-agents of one kind differ in their first message); a history
    that continues (two messages shared, or all of the record's); the same system prompt and tools
    (a compaction replaced the first message); the same first message and one of them. The
    longest shared history, then the most recent, decides among equals. Side calls and sub-agents
    have a system prompt and tools of their own, though their first message may be the main one's.

    Also whether ``current`` surely continues that conversation (its record is then replaced): a
    match by system prompt and tools alone may be a compaction or another sub-agent of that kind
    starting (told apart by nothing in the request), so that record is kept too."""
    best: PreviousRequest | None = None
    best_key: tuple[int, int, int] | None = None
    for age, record in enumerate(records):
        hashes = record.hashes
        same_agent = hashes.system_static == current.system_static and hashes.tools == current.tools
        shared = _shared_messages(hashes.messages, current.messages)
        if same_agent and shared >= 1:
            rank = 4
        elif shared >= 2 or 1 <= shared == len(hashes.messages):
            rank = 3
        elif same_agent:
            rank = 2
        elif shared >= 1 and (hashes.system_static == current.system_static or hashes.tools == current.tools):
            rank = 1
        else:
            continue
        key = (rank, shared, -age)
        if best_key is None or key > best_key:
            best, best_key = record, key
    return best, best_key is not None and best_key[0] != 2


def _shared_messages(previous: tuple[str, ...], current: tuple[str, ...]) -> int:
    """How many leading messages two requests share (their hashes are cumulative: equal at ``i``
    means equal up to ``i``), by bisection."""
    low, high = 0, min(len(previous), len(current))
    while low < high:
        middle = (low + high + 1) // 2
        if previous[middle - 1] == current[middle - 1]:
            low = middle
        else:
            high = middle - 1
    return low
