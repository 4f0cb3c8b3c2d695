"""An AWS event stream (Bedrock ``InvokeModelWithResponseStream``) re-emitted as Anthropic SSE.

Frames are decoded by botocore's decoder; each frame becomes at most one SSE event, passed
through untouched where possible. Bedrock sends no ``ping``, so :class:`EventStreamResponse`
emits its own in silent gaps.

Details: docs/internals/gateway-streaming.md
"""

from __future__ import annotations

import asyncio
import binascii
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

import orjson
from botocore.eventstream import EventStreamBuffer, ParserError

from gateway.providers.base import UpstreamResponse
from gateway.streaming.sse import PING_EVENT, encode_event

log = logging.getLogger("switchyard.eventstream")

ExceptionMapper = Callable[[str, str], tuple[str, str]]
"""(exception type or error code, upstream message) -> (Anthropic ``error.type``, client message)."""

_TYPE_PREFIX = b'{"type":"'


def error_event(error_type: str, message: str) -> bytes:
    return encode_event("error", {"type": "error", "error": {"type": error_type, "message": message}})


def chunk_to_sse(payload: bytes) -> bytes:
    """One ``chunk`` payload as an SSE event (``b""`` when it carries no typed event)."""
    try:
        wrapper = orjson.loads(payload)
        event = binascii.a2b_base64(wrapper["bytes"])
    except (orjson.JSONDecodeError, KeyError, TypeError, binascii.Error):
        log.warning("dropping a malformed event-stream chunk (%d bytes)", len(payload))
        return b""
    name: bytes | None = None
    if event.startswith(_TYPE_PREFIX):
        end = event.find(b'"', 9)
        if end > 9 and b"\\" not in event[9:end]:
            name = event[9:end]
    if name is None or b"\n" in event or b"\r" in event:
        try:
            decoded = orjson.loads(event)
        except orjson.JSONDecodeError:
            log.warning("dropping an event-stream chunk that is not JSON (%d bytes)", len(event))
            return b""
        kind = decoded.get("type") if isinstance(decoded, dict) else None
        if not isinstance(kind, str) or not kind:
            return b""
        name = kind.encode()
        if b"\n" in event or b"\r" in event:
            event = orjson.dumps(decoded)
    return b"event: " + name + b"\ndata: " + event + b"\n\n"


class EventStreamToSSE:
    """Incremental translator: feed event-stream bytes, get SSE bytes for the frames completed."""

    __slots__ = ("_buffer", "_map_exception", "failed")

    def __init__(self, map_exception: ExceptionMapper) -> None:
        self._buffer = EventStreamBuffer()
        self._map_exception = map_exception
        self.failed = False

    def feed(self, data: bytes) -> bytes:
        if self.failed:
            return b""
        buffer = self._buffer
        buffer.add_data(data)
        out: list[bytes] = []
        try:
            for message in buffer:
                headers = message.headers
                kind = headers.get(":message-type")
                if kind == "event":
                    if headers.get(":event-type") == "chunk":
                        out.append(chunk_to_sse(message.payload))
                elif kind == "exception":
                    out.append(self._exception(str(headers.get(":exception-type", "")), message.payload))
                elif kind == "error":
                    code = str(headers.get(":error-code", "InternalFailure"))
                    out.append(self._error(code, str(headers.get(":error-message", ""))))
        except ParserError as exc:
            log.warning("corrupt upstream event stream: %s", type(exc).__name__)
            self.failed = True
            out.append(error_event("api_error", "the upstream event stream was corrupt"))
        return b"".join(out)

    def _exception(self, exception_type: str, payload: bytes) -> bytes:
        message = ""
        try:
            decoded = orjson.loads(payload) if payload else {}
        except orjson.JSONDecodeError:
            decoded = {}
        if isinstance(decoded, dict):
            for key in ("message", "Message"):
                if isinstance(decoded.get(key), str):
                    message = decoded[key]
                    break
        return self._error(exception_type, message)

    def _error(self, code: str, message: str) -> bytes:
        error_type, client_message = self._map_exception(code, message)
        return error_event(error_type, client_message)


class EventStreamResponse(UpstreamResponse):
    """A 200 event-stream upstream response, relayed as Anthropic SSE with pings in silent gaps.

    ``read_chunk`` returns the next bytes (``b""`` at the end) and must be cancellation-safe
    (aiohttp's ``StreamReader.readany`` is), since a silent gap interrupts it to send a ping.
    """

    def __init__(
        self,
        read_chunk: Callable[[], Awaitable[bytes]],
        release: Callable[[], None],
        translator: EventStreamToSSE,
        *,
        headers: list[tuple[str, str]],
        ping_interval_s: float,
    ) -> None:
        self.status = 200
        self.headers = headers
        self.is_event_stream = True
        self._read_chunk = read_chunk
        self._release = release
        self._translator = translator
        self._ping_interval_s = ping_interval_s

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        read_chunk = self._read_chunk
        translator = self._translator
        interval = self._ping_interval_s
        while True:
            deadline = asyncio.timeout(interval)
            try:
                async with deadline:
                    data = await read_chunk()
            except TimeoutError:
                if not deadline.expired():
                    raise
                yield PING_EVENT
                continue
            if not data:
                return
            sse = translator.feed(data)
            if sse:
                yield sse
            if translator.failed:
                return

    async def read(self) -> bytes:
        return b"".join([chunk async for chunk in self.iter_chunks()])

    def close(self) -> None:
        self._release()
