"""A deliberately fast fake Anthropic upstream, meant to run in its own process.

It is a raw :class:`asyncio.Protocol` HTTP/1.1 server (keep-alive, pipelining-safe, ``Content-Length``
or chunked request bodies) on uvloop when available. Every reply is precomputed ``bytes``:

* ``POST /v1/messages`` without ``"stream": true`` -> a fixed ``Message`` JSON (``Content-Length``).
* ``POST /v1/messages`` with ``"stream": true`` -> ``message_start``, ``ping``,
  ``content_block_start``, N ``content_block_delta`` (``text_delta``), ``content_block_stop``,
  ``message_delta`` (``end_turn``, cumulative usage), ``message_stop``; chunked transfer encoding,
  one chunk per event, like the real API. With ``--event-delay`` > 0 the events are written one at
  a time with that pause between them (one shared timer paces all streams); otherwise the whole body
  goes out in one write.
* ``POST /v1/messages/count_tokens`` -> ``{"input_tokens": N}``; ``GET /healthz`` -> ``{"status":"ok"}``.

Any auth header (or none) is accepted; the query string is ignored.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from dataclasses import dataclass
from typing import Final, cast

import orjson

from bench import payloads

MAX_HEADER_BYTES: Final = 64 * 1024
MAX_BODY_BYTES: Final = 32 * 1024 * 1024


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _response(status: str, content_type: bytes, body: bytes, close: bool = False) -> bytes:
    head = (
        b"HTTP/1.1 " + status.encode() + b"\r\n"
        b"content-type: " + content_type + b"\r\n"
        b"content-length: " + str(len(body)).encode() + b"\r\n"
        b"request-id: req_bench\r\n"
    )
    if close:
        head += b"connection: close\r\n"
    return head + b"\r\n" + body


def _error(status: str, error_type: str, message: str) -> bytes:
    body = orjson.dumps({"type": "error", "error": {"type": error_type, "message": message}})
    return _response(status, b"application/json", body, close=True)


JSON: Final = b"application/json"
SSE_HEAD: Final = (
    b"HTTP/1.1 200 OK\r\n"
    b"content-type: text/event-stream; charset=utf-8\r\n"
    b"cache-control: no-cache\r\n"
    b"request-id: req_bench\r\n"
    b"transfer-encoding: chunked\r\n"
)


@dataclass(frozen=True)
class Replies:
    """All reply byte strings, built once."""

    message: bytes
    count_tokens: bytes
    healthz: bytes
    sse_head: bytes
    sse_chunks: tuple[bytes, ...]
    sse_full: bytes  # head + every chunk + terminator, for the zero-delay fast path

    @classmethod
    def build(cls, deltas: int) -> Replies:
        chunks = tuple(_chunk(ev) for ev in payloads.stream_events(deltas))
        return cls(
            message=_response("200 OK", JSON, payloads.message_body()),
            count_tokens=_response("200 OK", JSON, orjson.dumps({"input_tokens": payloads.INPUT_TOKENS})),
            healthz=_response("200 OK", JSON, b'{"status":"ok"}'),
            sse_head=SSE_HEAD + b"\r\n",
            sse_chunks=chunks,
            sse_full=SSE_HEAD + b"\r\n" + b"".join(chunks) + b"0\r\n\r\n",
        )


def _parse_chunked(buf: bytearray, pos: int) -> tuple[bytes, int] | None:
    """Decode a chunked body starting at ``pos``; ``None`` if it is not complete yet."""
    parts: list[bytes] = []
    while True:
        eol = buf.find(b"\r\n", pos)
        if eol < 0:
            return None
        size = int(bytes(buf[pos:eol]).split(b";", 1)[0], 16)
        pos = eol + 2
        if size == 0:
            end = buf.find(b"\r\n\r\n", pos - 2)  # skip (ignored) trailers
            return (b"".join(parts), end + 4) if end >= 0 else None
        if len(buf) < pos + size + 2:
            return None
        parts.append(bytes(buf[pos : pos + size]))
        pos += size + 2


def wants_stream(body: bytes) -> bool:
    """True when the JSON body has ``"stream": true`` (cheap substring test before parsing)."""
    if b'"stream"' not in body:
        return False
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return False
    return isinstance(parsed, dict) and parsed.get("stream") is True


class Pacer:
    """Writes the next SSE event of every paced stream once per ``interval``.

    One shared timer instead of one sleep per stream keeps the fake upstream cheap with hundreds of
    concurrent paced streams. (uvloop timers have millisecond resolution, so intervals below 1 ms
    behave like 1 ms.)
    """

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._streams: list[UpstreamProtocol] = []
        self._handle: asyncio.TimerHandle | None = None

    def add(self, stream: UpstreamProtocol) -> None:
        self._streams.append(stream)
        if self._handle is None:
            self._handle = asyncio.get_running_loop().call_later(self.interval, self._tick)

    def _tick(self) -> None:
        streams, self._streams = self._streams, []
        for stream in streams:
            if not stream.send_next_event():  # may add a new stream of the same connection
                self._streams.append(stream)
        loop = asyncio.get_running_loop()
        self._handle = loop.call_later(self.interval, self._tick) if self._streams else None


class UpstreamProtocol(asyncio.Protocol):
    """One client connection. Requests are answered strictly in order."""

    def __init__(self, replies: Replies, pacer: Pacer | None) -> None:
        self._replies = replies
        self._pacer = pacer
        self._buf = bytearray()
        self._transport: asyncio.Transport | None = None
        self._busy = False  # a paced stream is being written; hold further requests
        self._next_event = 0
        self._close_after = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's transports are not subclasses

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None

    def data_received(self, data: bytes) -> None:
        self._buf += data
        if not self._busy:
            self._process()

    def _process(self) -> None:
        buf = self._buf
        transport = self._transport
        while transport is not None and not self._busy:
            head_end = buf.find(b"\r\n\r\n")
            if head_end < 0:
                if len(buf) > MAX_HEADER_BYTES:
                    self._fail("431 Request Header Fields Too Large", "headers too large")
                return
            lines = bytes(buf[:head_end]).split(b"\r\n")
            try:
                method, target, version = lines[0].split(b" ", 2)
            except ValueError:
                self._fail("400 Bad Request", "malformed request line")
                return
            length = 0
            chunked = False
            close = version == b"HTTP/1.0"
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                name = name.strip().lower()
                if name == b"content-length":
                    length = int(value)
                elif name == b"transfer-encoding":
                    chunked = b"chunked" in value.lower()
                elif name == b"connection":
                    token = value.strip().lower()
                    close = token == b"close" or (close and token != b"keep-alive")
            body_start = head_end + 4
            if chunked:
                decoded = _parse_chunked(buf, body_start)
                if decoded is None:
                    return
                body, consumed = decoded
            else:
                if length > MAX_BODY_BYTES:
                    self._fail("413 Request Entity Too Large", "body too large")
                    return
                if len(buf) < body_start + length:
                    return
                body = bytes(buf[body_start : body_start + length])
                consumed = body_start + length
            del buf[:consumed]
            self._dispatch(method, target.split(b"?", 1)[0], body, close)
            if close and self._transport is not None and not self._busy:
                self._transport.close()
                return

    def _dispatch(self, method: bytes, path: bytes, body: bytes, close: bool) -> None:
        transport = self._transport
        assert transport is not None
        r = self._replies
        if path == b"/v1/messages":
            if method != b"POST":
                transport.write(_error("405 Method Not Allowed", "invalid_request_error", "use POST"))
            elif not wants_stream(body):
                transport.write(r.message)
            elif self._pacer is None:
                transport.write(r.sse_full)
            else:
                transport.write(r.sse_head)
                self._busy = True
                self._next_event = 0
                self._close_after = close
                self._pacer.add(self)
        elif path == b"/v1/messages/count_tokens" and method == b"POST":
            transport.write(r.count_tokens)
        elif path in (b"/healthz", b"/health") and method == b"GET":
            transport.write(r.healthz)
        else:
            transport.write(_error("404 Not Found", "not_found_error", f"no route for {path.decode()!r}"))

    def send_next_event(self) -> bool:
        """Write the next event of the paced stream; True when the stream is over."""
        transport = self._transport
        if transport is None or transport.is_closing():
            self._busy = False
            return True
        chunks = self._replies.sse_chunks
        transport.write(chunks[self._next_event])
        self._next_event += 1
        if self._next_event < len(chunks):
            return False
        transport.write(b"0\r\n\r\n")
        self._busy = False
        if self._close_after:
            transport.close()
        elif self._buf:
            self._process()
        return True

    def _fail(self, status: str, message: str) -> None:
        if self._transport is not None:
            self._transport.write(_error(status, "invalid_request_error", message))
            self._transport.close()
        self._buf.clear()


async def start_server(
    host: str = "127.0.0.1", port: int = 0, deltas: int = payloads.DEFAULT_DELTAS, event_delay: float = 0.0
) -> asyncio.Server:
    """Start listening (in the running loop) and return the server; its port is in ``sockets``."""
    replies = Replies.build(deltas)
    pacer = Pacer(event_delay) if event_delay > 0 else None
    loop = asyncio.get_running_loop()
    return await loop.create_server(
        lambda: UpstreamProtocol(replies, pacer), host, port, backlog=1024, reuse_address=True
    )


def server_port(server: asyncio.Server) -> int:
    port: int = server.sockets[0].getsockname()[1]
    return port


async def serve_forever(host: str, port: int, deltas: int, event_delay: float) -> None:
    """Run until SIGTERM/SIGINT; print ``READY <port>`` on stdout once listening."""
    server = await start_server(host, port, deltas, event_delay)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"READY {server_port(server)}", flush=True)
    async with server:
        await stop.wait()
    with contextlib.suppress(Exception):
        sys.stdout.flush()
