"""Per-chunk scanning of an SSE byte stream: event boundaries and names found with bytes
operations that run in C, data kept only for the few events anyone reads.

Hot path: content deltas are never copied or parsed; any non-canonical region goes through the
general ``SSEParser`` rules so the result equals event-by-event parsing.

Details: docs/internals/gateway-streaming.md
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

from gateway.streaming.sse import SSEParser, normalise_endings

MAX_EVENT_BYTES: Final = 1 << 20
"""Largest partial event carried between chunks; the notable events are a few hundred bytes."""

Notable = tuple[bytes, bytes]  # (event name, data) of a message_start/_delta/_stop or error event

_PING_KIND, _DATA_KIND, _CONTENT_KIND, _NOTABLE_KIND = range(4)
_KINDS: Final = {
    b"ping": _PING_KIND,
    b"content_block_start": _CONTENT_KIND,
    b"content_block_delta": _CONTENT_KIND,
    b"message_start": _NOTABLE_KIND,
    b"message_delta": _NOTABLE_KIND,
    b"message_stop": _NOTABLE_KIND,
    b"error": _NOTABLE_KIND,
}
"""Event names the scanner tells apart; any other name is a plain data event."""

_EVENT: Final = re.compile(rb"event: ([^\n]*)\ndata: ([^\n]*)\n\n")  # one canonical event
_NEXT: Final = re.compile(
    rb"(?:event: content_block_(?:delta|start)\ndata: [^\n]*+\n\n)++|event: ([^\n]*)\ndata: ([^\n]*)\n\n"
)
"""The next canonical event(s): a run of content events in a row, passed over in one match (most
of a stream read in one go), else one event, its name and data in groups 1 and 2."""
DELTA_HEAD: Final = b"event: content_block_delta\ndata: "
"""How a chunk of one canonical ``content_block_delta`` event starts (``StreamObserver.feed``
tells such a chunk apart without the scanner, when the scanner is ``at_boundary``)."""
DELTA_DATA: Final = len(DELTA_HEAD)
_NAME_HEAD: Final = 256  # bytes of an oversized event searched for its name line
_NONE: Final[tuple[Notable, ...]] = ()


class EventScanner:
    """Scans a chunked SSE stream (see the module docstring). After each ``feed``: ``data`` says
    whether that chunk completed a data event (any event but ``ping``), ``content_seen`` whether
    any content event has been completed so far, ``at_boundary`` whether the stream so far ends
    between events (nothing carried over, no ``\\r`` that a ``\\n`` may complete)."""

    __slots__ = (
        "_after_cr",
        "_pending",
        "_skip",
        "_skip_nl",
        "at_boundary",
        "content_seen",
        "data",
        "error_before_content",
    )

    def __init__(self) -> None:
        self.data = False
        self.content_seen = False
        self.error_before_content = False  # an ``error`` event completed before any content event
        self.at_boundary = True
        self._pending = bytearray()  # the start of an event carried over from earlier chunks
        self._after_cr = False
        self._skip: bytes | None = None  # name of an oversized event being skipped
        self._skip_nl = False  # the skipped bytes so far end with "\n"

    @property
    def pending_bytes(self) -> int:
        """Bytes of an unfinished event held until a later chunk completes it."""
        return len(self._pending)

    def feed(self, chunk: bytes) -> Sequence[Notable]:
        """Scan ``chunk``; the notable events it completes, in stream order."""
        found = self._feed(chunk)
        self.at_boundary = not self._pending and self._skip is None and not self._after_cr
        return found

    def _feed(self, chunk: bytes) -> Sequence[Notable]:
        self.data = False
        if self._after_cr or b"\r" in chunk:
            chunk, self._after_cr = normalise_endings(chunk, self._after_cr)
        if not self._pending and self._skip is None:
            # one whole event, the usual chunk of a live stream (a chunk of several, as a fast
            # upstream's arrive, is not tried: a failed full match backtracks over its first event)
            event = _EVENT.fullmatch(chunk) if chunk.find(b"\n\n") == len(chunk) - 2 else None
            if event is not None:
                return self._first(event)
        start = 0
        found: Sequence[Notable] = _NONE
        if self._pending or self._skip is not None:
            start, found = self._complete(chunk)
            if start < 0:
                return _NONE
        last = chunk.rfind(b"\n\n", start)
        end = start
        if last >= 0:
            end = last + 2
            more = self._region(chunk, start, end)
            if more:
                found = [*found, *more] if found else more
        if end < len(chunk):
            self._hold(chunk, end)
        return found

    # -- the event carried over ---------------------------------------------------------------------
    def _complete(self, chunk: bytes) -> tuple[int, Sequence[Notable]]:
        """Finish the carried-over event with the head of ``chunk``: where the rest of the chunk
        starts and the notable event it was, or -1 when ``chunk`` does not finish it."""
        skip = self._skip
        ends_nl = self._skip_nl if skip is not None else self._pending[-1] == 10
        if ends_nl and chunk[:1] == b"\n":
            end = 1
        else:
            blank = chunk.find(b"\n\n")
            if blank < 0:
                self._hold(chunk, 0)
                return -1, _NONE
            end = blank + 2
        if skip is not None:
            self._skip = None
            return end, self._named(skip, b"")
        region = bytes(self._pending) + chunk[:end]
        self._pending.clear()
        return end, self._region(region, 0, len(region))

    def _hold(self, chunk: bytes, at: int) -> None:
        """Carry ``chunk[at:]`` (the start of an event) over, within ``MAX_EVENT_BYTES``."""
        if len(chunk) == at:
            return
        if self._skip is not None:
            self._skip_nl = chunk[-1] == 10
            return
        pending = self._pending
        if len(pending) + len(chunk) - at <= MAX_EVENT_BYTES:
            pending += chunk[at:] if at else chunk
            return
        head = bytes(pending[:_NAME_HEAD]) if pending else chunk[at : at + _NAME_HEAD]
        self._skip = _name_line(head)
        self._skip_nl = chunk[-1] == 10
        pending.clear()

    # -- complete events ----------------------------------------------------------------------------
    def _named(self, name: bytes, data: bytes) -> Sequence[Notable]:
        """One complete event, known by its name."""
        kind = _KINDS.get(name, _DATA_KIND)
        if kind == _PING_KIND:
            return _NONE
        self.data = True
        if kind == _CONTENT_KIND:
            self.content_seen = True
        elif kind == _NOTABLE_KIND:
            if name == b"error" and not self.content_seen:
                self.error_before_content = True
            return [(name, data)]
        return _NONE

    def _region(self, buf: bytes, start: int, end: int) -> Sequence[Notable]:
        """The complete events of ``buf[start:end]``: runs of canonical content events are passed
        over in one match, other canonical events parsed one by one, and the rest from the first
        event that is not framed canonically goes through the general rules (an event ends at its
        first blank line either way, so parsing restarts cleanly there)."""
        found: list[Notable] | None = None
        pos = start
        kinds = _KINDS
        while pos < end:
            event = _NEXT.match(buf, pos, end)
            if event is None:
                more = self._general(buf[pos:end])
                return [*found, *more] if found else more
            pos = event.end()
            name = event[1]
            if name is None:  # content events
                self.data = self.content_seen = True
                continue
            kind = kinds.get(name, _DATA_KIND)
            if kind == _PING_KIND:
                continue
            self.data = True
            if kind == _NOTABLE_KIND:
                if name == b"error" and not self.content_seen:  # (in stream order: runs set it as met)
                    self.error_before_content = True
                if found is None:
                    found = []
                found.append((name, event[2]))
            elif kind == _CONTENT_KIND:  # (framed canonically, content events make a run)
                self.content_seen = True
        return found or _NONE

    def _first(self, event: re.Match[bytes]) -> Sequence[Notable]:
        """One event matched by ``_EVENT``."""
        return self._named(event[1], event[2])

    def _general(self, region: bytes) -> Sequence[Notable]:
        """Events not framed canonically: the SSE spec's rules, event by event."""
        found: list[Notable] = []
        for event in SSEParser().feed(region):
            found.extend(self._named(event.event.encode(), event.data))
        return found


def events_end(data: bytes) -> int:
    """Where the last complete event of ``data`` ends (after its blank line); 0 if none does.

    ``len(data)`` for ``\r`` line endings, which are passed on as they come (Anthropic-compatible
    servers end lines with ``\n``; a raw ``\r`` in an event is a line ending, JSON escapes it).
    """
    if data.endswith(b"\n\n") or b"\r" in data:
        return len(data)
    last = data.rfind(b"\n\n")
    return last + 2 if last >= 0 else 0


def _name_line(head: bytes) -> bytes:
    """The name of an event from its first bytes: its ``event:`` line, else 'message'."""
    newline = head.find(b"\n")
    if not head.startswith(b"event:") or newline < 0:
        return b"message"
    name = head[6:newline]
    return name[1:] if name[:1] == b" " else name
