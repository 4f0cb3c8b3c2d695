"""Incremental Server-Sent Events parser and encoder.

The parser is fed raw chunks as they arrive and returns the complete events they finish. Every
byte is scanned once: complete events are consumed from the buffer and only the unfinished tail is
kept, so total work is O(total bytes) regardless of how the stream is chunked. Data payloads are
returned as raw bytes; callers decide which events are worth JSON-decoding.

Line endings: ``\\n``, ``\\r\\n`` and a lone ``\\r`` are all recognised, as the SSE spec requires
(``normalise_endings`` rewrites the last two to ``\\n``, also when a ``\\r\\n`` is split across
chunks). The relay does not use this parser: it observes streams per chunk
(``streaming.scan``); the loop's in-process caller and the tests decode every event with it.
"""

from __future__ import annotations

from typing import NamedTuple

import orjson


class SSEEvent(NamedTuple):
    """One dispatched event: its ``event:`` name ('message' when absent) and joined data."""

    event: str
    data: bytes


def normalise_endings(chunk: bytes, after_cr: bool) -> tuple[bytes, bool]:
    """``chunk`` with ``\\r\\n`` and lone ``\\r`` line endings rewritten to ``\\n``.

    ``after_cr`` says the previous chunk ended with ``\\r``: a ``\\n`` starting this one is the
    second half of that ``\\r\\n`` and is dropped. Returns the chunk and whether it ends with ``\\r``.
    """
    if after_cr:
        if not chunk:
            return chunk, True
        if chunk[0] == 10:
            chunk = chunk[1:]
    if b"\r" not in chunk:
        return chunk, False
    ends_with_cr = chunk[-1:] == b"\r"
    return chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n"), ends_with_cr


class SSEParser:
    """Stateful, incremental SSE decoder.

    The stream (line endings normalised to ``\\n``) is cut at blank lines (``\\n\\n``); an event
    framed the way the API frames it (one ``event:`` line, one ``data:`` line) is decoded with two
    slices, anything else goes through the general per-line rules.
    """

    __slots__ = ("_after_cr", "_buf", "_data", "_event", "_has_data", "_scan")

    def __init__(self) -> None:
        self._buf = bytearray()
        self._scan = 0  # bytes of _buf already searched for a terminator
        self._after_cr = False
        self._event = ""
        self._data: list[bytes] = []
        self._has_data = False

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Consume ``chunk`` and return the events it completes, in order."""
        if self._after_cr or b"\r" in chunk:
            chunk, self._after_cr = normalise_endings(chunk, self._after_cr)
        buf = self._buf
        buf += chunk
        events: list[SSEEvent] = []
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
        self._after_cr = False
        self._event = ""
        self._data = []
        self._has_data = False
        return []

    @property
    def pending_bytes(self) -> int:
        """Bytes received but not yet part of a complete event."""
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
