"""Token usage as the upstream reports it, observed without rebuilding the response.

Streams: ``message_start`` carries the initial usage and every ``message_delta`` carries the
*cumulative* usage so far (fields present overwrite, as the SDK's accumulator does). Only those
events, plus ``error``, are JSON-decoded; the stream is scanned per chunk (``streaming.scan``), so
content deltas are counted by their event name without being sliced out, let alone parsed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeGuard

import orjson

from gateway.errors import plausible_error_type
from gateway.streaming.failure import malformed_event
from gateway.streaming.scan import DELTA_DATA, DELTA_HEAD, EventScanner


@dataclass(slots=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_write_5m_tokens: int = 0
    cache_write_1h_tokens: int = 0
    cache_miss_reason: str | None = None  # the upstream's own diagnostics.cache_miss_reason, if sent

    @property
    def cache_creation_input_tokens(self) -> int:
        return self.cache_write_5m_tokens + self.cache_write_1h_tokens

    def update(self, reported: Mapping[str, Any]) -> None:
        """Overwrite with the fields ``reported`` carries (Anthropic usage semantics): an integer
        (not a bool) counts, anything else leaves the field as it was."""
        get = reported.get
        value = get("input_tokens")
        if type(value) is int or (value is not None and _int(value)):
            self.input_tokens = value
        value = get("output_tokens")
        if type(value) is int or (value is not None and _int(value)):
            self.output_tokens = value
        value = get("cache_read_input_tokens")
        if type(value) is int or (value is not None and _int(value)):
            self.cache_read_input_tokens = value
        breakdown = get("cache_creation")
        if isinstance(breakdown, dict):
            value = breakdown.get("ephemeral_5m_input_tokens")
            if type(value) is int or (value is not None and _int(value)):
                self.cache_write_5m_tokens = value
            value = breakdown.get("ephemeral_1h_input_tokens")
            if type(value) is int or (value is not None and _int(value)):
                self.cache_write_1h_tokens = value
        else:
            total = get("cache_creation_input_tokens")
            if isinstance(total, int):  # no TTL breakdown: whatever is not known as 1h is 5m
                self.cache_write_5m_tokens = max(total - self.cache_write_1h_tokens, 0)

    def as_dict(self) -> dict[str, int]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_input_tokens": self.cache_read_input_tokens,
            "cache_creation_input_tokens": self.cache_creation_input_tokens,
            "cache_write_5m_tokens": self.cache_write_5m_tokens,
            "cache_write_1h_tokens": self.cache_write_1h_tokens,
        }


def _int(value: object) -> TypeGuard[int]:
    """An int subclass other than bool (``Usage.update`` tests ``type(value) is int`` first)."""
    return isinstance(value, int) and not isinstance(value, bool)


def usage_from_message(body: bytes) -> tuple[Usage, str | None] | None:
    """Usage and stop_reason of a complete (non-streaming) Message body; ``None`` when the body is
    not a JSON object (an HTML page, nothing, bytes that are not JSON): not a Message at all."""
    usage = Usage()
    try:
        message = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(message, dict):
        return None
    reported = message.get("usage")
    if isinstance(reported, dict):
        usage.update(reported)
    usage.cache_miss_reason = miss_reason(message)
    stop = message.get("stop_reason")
    return usage, stop if isinstance(stop, str) else None


def miss_reason(message: Mapping[str, Any]) -> str | None:
    """``diagnostics.cache_miss_reason`` of a Message (sent when the request asked for it)."""
    diagnostics = message.get("diagnostics")
    if isinstance(diagnostics, dict):
        reason = diagnostics.get("cache_miss_reason")
        if isinstance(reason, str) and reason:
            return reason
    return None


MAX_ERROR_MESSAGE: Final = 4096
"""An upstream ``error`` event's message is kept up to this many characters (the client's answer
and the access line quote it; the API's are a line or two, an upstream's could be a megabyte)."""


class StreamObserver:
    """Watches an Anthropic SSE byte stream go by, chunk by chunk, and keeps what metrics and logs
    need. Event boundaries and names are found per chunk by ``EventScanner``; only
    ``message_start``, ``message_delta`` and ``error`` data are JSON-decoded.

    ``finished``: the stream reached a terminal event (``message_stop`` or ``error``).
    """

    __slots__ = (
        "_scanner",
        "clock",
        "error_message",
        "error_type",
        "finished",
        "first_content_at",
        "message_started",
        "message_stopped",
        "stop_reason",
        "usage",
    )

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.usage = Usage()
        self.stop_reason: str | None = None
        self.error_type: str | None = None
        self.error_message = ""  # the ``error`` event's own message, when one came
        self.first_content_at: float | None = None
        self.message_started = False
        self.message_stopped = False
        self.finished = False
        self._scanner = EventScanner()

    @property
    def content_seen(self) -> bool:
        """A ``content_block_start`` or ``content_block_delta`` event has been completed."""
        return self._scanner.content_seen

    @property
    def error_before_content(self) -> bool:
        """An ``error`` event came before any content event, in stream order (whatever chunks
        carried them: an error and content in one chunk are told apart by their order)."""
        return self._scanner.error_before_content

    def feed(self, chunk: bytes) -> bool:
        """Observe one chunk; True when it completed a data event (anything but a ping)."""
        scanner = self._scanner
        if (
            scanner.at_boundary
            and chunk.startswith(DELTA_HEAD)
            and chunk.find(b"\n", DELTA_DATA) == len(chunk) - 2
            and chunk[-1] == 10
            and b"\r" not in chunk
        ):
            # one content_block_delta event, the usual chunk of a live stream (its one data line
            # ends where the closing blank line starts): content, nothing to decode
            if self.first_content_at is None:
                self.first_content_at = self.clock()
                scanner.content_seen = True
            return True
        notable = scanner.feed(chunk)
        if self.first_content_at is None and scanner.content_seen:
            self.first_content_at = self.clock()
        for name, data in notable:
            self._notable(name, data)
        return scanner.data

    def _notable(self, name: bytes, data: bytes) -> None:
        """Read a decoded event; a ``message_start`` or ``message_delta`` that is not a JSON object
        (``message`` one) raises ``StreamFailure``: the relay does not pass that chunk on. (An
        event over ``MAX_EVENT_BYTES`` comes without its data, ``b""``: not read, not judged.)"""
        if name == b"message_delta":
            decoded = _object(data)
            if decoded is None:
                if data:
                    raise malformed_event("message_delta")
                return
            reported = decoded.get("usage")
            if isinstance(reported, dict):
                self.usage.update(reported)
            delta = decoded.get("delta")
            if isinstance(delta, dict):
                reason = delta.get("stop_reason")
                if isinstance(reason, str):
                    self.stop_reason = reason
        elif name == b"message_start":
            message = (_object(data) or {}).get("message")
            if not isinstance(message, dict) and data:
                raise malformed_event("message_start")
            self.message_started = True
            if not isinstance(message, dict):
                return
            reported = message.get("usage")
            if isinstance(reported, dict):  # what ``_object`` gives is orjson's: dicts
                self.usage.update(reported)
            self.usage.cache_miss_reason = miss_reason(message)
        elif name == b"message_stop":
            self.message_stopped = self.finished = True
        else:  # error
            error = _decode(data).get("error")
            kind = error.get("type") if isinstance(error, dict) else None
            message = error.get("message") if isinstance(error, dict) else None
            self.error_type = kind if plausible_error_type(kind) else "api_error"
            self.error_message = message[:MAX_ERROR_MESSAGE] if isinstance(message, str) else ""
            self.finished = True


def _decode(data: bytes) -> dict[str, Any]:
    return _object(data) or {}


def _object(data: bytes) -> dict[str, Any] | None:
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None
