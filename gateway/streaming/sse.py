"""Incremental Server-Sent Events parser and encoder.

The parser is fed raw chunks as they arrive and returns the complete events they finish. Every
byte is scanned once: complete lines are consumed from the buffer and only the unfinished tail is
kept, so total work is O(total bytes) regardless of how the stream is chunked. Data payloads are
returned as raw bytes; callers decide which events are worth JSON-decoding (the gateway decodes
only the handful that carry usage, never the per-token deltas).

Line endings: ``\\n`` and ``\\r\\n`` are recognised (a lone ``\\r`` line ending, legal in the SSE
spec but emitted by no Anthropic-compatible server, is not).
"""

from __future__ import annotations

from typing import NamedTuple

import orjson


class SSEEvent(NamedTuple):
    """One dispatched event: its ``event:`` name ('message' when absent) and joined data."""

    event: str
    data: bytes


class SSEParser:
    """Stateful, incremental SSE decoder.

    Streams with ``\\n`` line endings (every Anthropic-compatible server) are cut at blank lines
    (``\\n\\n``) and an event framed the way the API frames it (one ``event:`` line, one
    ``data:`` line) is decoded with two slices; anything else goes through the general per-line
    rules. A ``\\r`` anywhere switches the parser to line mode for the rest of the stream.
    """

    __slots__ = ("_buf", "_data", "_event", "_has_data", "_line_mode", "_scan")

    def __init__(self) -> None:
        self._buf = bytearray()
        self._scan = 0  # bytes of _buf already searched for a terminator
        self._line_mode = False
        self._event = ""
        self._data: list[bytes] = []
        self._has_data = False

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Consume ``chunk`` and return the events it completes, in order."""
        buf = self._buf
        buf += chunk
        if not self._line_mode and b"\r" in chunk:
            self._line_mode = True
            self._scan = 0
        events: list[SSEEvent] = []
        if self._line_mode:
            start = self._feed_lines(events)
        else:
            start = 0
            end = buf.find(b"\n\n", max(self._scan - 1, 0))
            while end >= 0:
                if end > start:
                    self._block(bytes(buf[start:end]), events)
                start = end + 2
                end = buf.find(b"\n\n", start)
        if start:
            del buf[:start]
        self._scan = len(buf)
        return events

    def flush(self) -> list[SSEEvent]:
        """End of stream: an unterminated final event is discarded, as the SSE spec requires."""
        self._buf.clear()
        self._scan = 0
        self._event = ""
        self._data = []
        self._has_data = False
        return []

    @property
    def pending_bytes(self) -> int:
        """Bytes received but not yet part of a complete event (block mode) or line (line mode)."""
        return len(self._buf)

    def _block(self, block: bytes, events: list[SSEEvent]) -> None:
        """One blank-line-terminated block (without the terminator)."""
        if block.startswith(b"event: "):
            newline = block.find(b"\n")
            if (
                newline > 0
                and block.startswith(b"data: ", newline + 1)
                and block.find(b"\n", newline + 1) < 0
            ):
                events.append(SSEEvent(block[7:newline].decode("utf-8", "replace"), block[newline + 7 :]))
                return
        for line in block.split(b"\n"):
            if line:
                self._line(line)
            else:
                self._dispatch(events)
        self._dispatch(events)

    def _feed_lines(self, events: list[SSEEvent]) -> int:
        buf = self._buf
        start = 0
        nl = buf.find(b"\n", self._scan)
        while nl >= 0:
            end = nl - 1 if nl > start and buf[nl - 1] == 13 else nl  # strip \r of \r\n
            if end == start:
                self._dispatch(events)
            else:
                self._line(bytes(buf[start:end]))
            start = nl + 1
            nl = buf.find(b"\n", start)
        return start

    def _line(self, line: bytes) -> None:
        if line[0] == 58:  # ':' comment / keep-alive
            return
        colon = line.find(b":")
        if colon < 0:
            field, value = line, b""
        else:
            field = line[:colon]
            value = line[colon + 1 :]
            if value[:1] == b" ":
                value = value[1:]
        if field == b"data":
            self._data.append(value)
            self._has_data = True
        elif field == b"event":
            self._event = value.decode("utf-8", "replace")
        # 'id' and 'retry' carry nothing the gateway uses.

    def _dispatch(self, events: list[SSEEvent]) -> None:
        if self._has_data:
            data = self._data[0] if len(self._data) == 1 else b"\n".join(self._data)
            events.append(SSEEvent(self._event or "message", data))
        self._event = ""
        self._data = []
        self._has_data = False


def encode_event(event: str, data: bytes | str | dict[str, object]) -> bytes:
    """Frame one event the way the Anthropic API does: an ``event:`` line, one ``data:`` line."""
    if isinstance(data, dict):
        payload = orjson.dumps(data)
    elif isinstance(data, str):
        payload = data.encode()
    else:
        payload = data
    return b"event: " + event.encode() + b"\ndata: " + payload + b"\n\n"


PING_EVENT = encode_event("ping", b'{"type": "ping"}')
