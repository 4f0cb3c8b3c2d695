"""A request's messages, looked at once at C speed, and their cumulative hashes, reusing the
session's previous ones for the history it already sent.

No Python work per message of the already-sent history: one orjson pass, and only messages that
may hold a marker are walked. The hashes must equal those of hashing every message.

Details: docs/internals/gateway-cache.md
"""

from __future__ import annotations

import hashlib
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import compress, count, repeat
from typing import TYPE_CHECKING, Any, Final

import orjson

from gateway.cache.canonical import MARKER_KEY, as_blocks, canonical, digest, strip_markers
from gateway.values import value

if TYPE_CHECKING:
    from gateway.cache.prefix import PrefixHashes

MARKER_OBJECT: Final = b'"cache_control":{'  # a dict-valued marker, the only kind that counts


def _bare(encoded: bytes) -> bytes:
    """``encoded`` without markers (one C search when it holds none)."""
    return strip_markers(encoded) if MARKER_KEY in encoded else encoded


def _bare_json(messages: Sequence[Any]) -> bytes | None:
    """The JSON array of ``messages`` without markers (None: orjson cannot encode it)."""
    try:
        return _bare(orjson.dumps(messages))
    except (orjson.JSONEncodeError, ValueError):
        return None


@value
class MessageScan:
    """What one look at a request's messages found."""

    messages: Sequence[Any]  # the list looked at (a rebuilt list is looked at again)
    settled: int  # how many leading messages were encoded together
    settled_json: bytes | None  # their JSON array without markers (None: not encodable)
    marked: tuple[int, ...]  # ascending indices of the messages that may hold a marker

    def follow(self, payload: Mapping[str, Any]) -> MessageScan:
        """The scan of ``payload``, a copy-on-write edit of the scanned one: only the messages
        that are not the scanned objects any more are looked at again."""
        messages = payload.get("messages")
        if messages is self.messages:
            return self
        if not isinstance(messages, list) or len(messages) != len(self.messages):
            return scan_messages(payload, self.settled)
        changed = tuple(compress(count(), map(operator.is_not, messages, self.messages)))
        settled_json = self.settled_json
        if changed and changed[0] < self.settled:
            settled_json = _bare_json(messages[: self.settled])
        marked = tuple(sorted({*self.marked, *changed}))
        return MessageScan(messages, self.settled, settled_json, marked)


def scan_messages(payload: Mapping[str, Any], settled: int | None = None) -> MessageScan:
    """Look at ``payload``'s messages. ``settled``: how many leading ones are expected to be the
    same as in the session's previous request (its message count less one); ``None``: all but
    the last."""
    messages = payload.get("messages")
    if not isinstance(messages, list):
        return MessageScan((), 0, b"[]", ())
    total = len(messages)
    if total <= 1:
        return MessageScan(messages, 0, b"[]", tuple(range(total)))
    settled = max(0, min(total - 1 if settled is None else settled, total - 1))
    head = messages[:settled]
    try:
        encoded = orjson.dumps(head)
        has_markers = MARKER_KEY in encoded
        settled_json = strip_markers(encoded) if has_markers else encoded
    except (orjson.JSONEncodeError, ValueError):
        return MessageScan(messages, settled, None, tuple(range(total)))
    marked: tuple[int, ...] = ()
    if has_markers and MARKER_OBJECT in encoded:  # which messages: one more C pass
        marked = tuple(
            compress(count(), map(operator.contains, map(orjson.dumps, head), repeat(MARKER_OBJECT)))
        )
    return MessageScan(messages, settled, settled_json, (*marked, *range(settled, total)))


@dataclass(frozen=True, slots=True)
class History:
    messages: tuple[str, ...]  # cumulative hashes, one per message
    first_message: str  # hash of messages[0] alone
    check: str  # SHA-256 of the JSON of every message but the last, without markers ("": none)


def _checks(head: bytes, rest: bytes) -> tuple[str, str]:
    """SHA-256 of the JSON array ``head`` and of the array ``head`` + ``rest`` (one pass)."""
    hasher = hashlib.sha256()
    hasher.update(memoryview(head)[:-1])
    closed = hasher.copy()
    closed.update(b"]")
    verify = closed.hexdigest()
    if len(rest) <= 2:  # b"[]"
        return verify, verify
    hasher.update(b"," if len(head) > 2 else b"")
    hasher.update(memoryview(rest)[1:])
    return verify, hasher.hexdigest()


def history_hashes(scan: MessageScan, previous: PrefixHashes | None) -> History:
    """The cumulative hashes of ``scan``'s messages; ``previous``: the session's last request."""
    messages = scan.messages
    total = len(messages)
    if total == 0:
        return History((), "", "")
    # the part to compare: what the previous request had, bar its last message (which automatic
    # caching may have rewritten); without a record to compare with, whatever the scan encoded
    settled = scan.settled
    comparable = previous is not None and bool(previous.history_check) and 0 < len(previous.messages) <= total
    if previous is not None and comparable:
        settled = len(previous.messages) - 1
    head = scan.settled_json if settled == scan.settled else _bare_json(messages[:settled])
    rest = _bare_json(messages[settled : total - 1]) if head is not None else None
    reused: tuple[str, ...] = ()
    first = ""
    check = ""
    if head is not None and rest is not None:
        verify, check = _checks(head, rest)
        if previous is not None and comparable and settled > 0 and verify == previous.history_check:
            reused, first = previous.messages[:settled], previous.first_message
    hashes: list[str] = []
    running = reused[-1].encode() if reused else b""
    for index in range(len(reused), total):
        encoded = canonical(as_blocks(messages[index]))
        running = digest(running, encoded).encode()
        hashes.append(running.decode())
        if index == 0:
            first = digest(encoded)
    return History(reused + tuple(hashes), first, check)
