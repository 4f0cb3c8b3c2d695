"""A minimal, low-overhead HTTP/1.1 client connection for the load generator.

One :class:`ClientConnection` is one keep-alive TCP connection carrying one request at a time. The
response parser handles ``Content-Length``, chunked and read-until-close bodies and never copies
the body: it only counts bytes and, for streamed replies, scans the de-chunked payload for the
first ``content_block_delta`` and for ``message_stop`` near the end (the latter proves the SSE
stream was complete). Timestamps are ``time.perf_counter()`` values.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from dataclasses import dataclass
from typing import Final, cast
from urllib.parse import urlsplit

from bench.payloads import STREAM_END_MARKER

DELTA_MARKER: Final = b"content_block_delta"
_TAIL: Final = 64
_MAX_HEAD: Final = 64 * 1024


class ResponseError(Exception):
    """The connection failed or the response was malformed."""


@dataclass(slots=True)
class Response:
    status: int
    t_first_byte: float  # first body byte (0.0 when the body is empty)
    t_first_delta: float  # first byte of the payload chunk holding the first content_block_delta (or 0.0)
    t_end: float
    body_bytes: int
    complete_stream: bool  # payload ended with message_stop


@dataclass(frozen=True, slots=True)
class Target:
    host: str
    port: int
    path: str  # full request path, e.g. /v1/messages
    tls: bool

    @classmethod
    def parse(cls, base_url: str, path: str = "/v1/messages") -> Target:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"unsupported target URL {base_url!r} (need http[s]://host[:port][/prefix])")
        tls = parts.scheme == "https"
        port = parts.port or (443 if tls else 80)
        return cls(parts.hostname, port, parts.path.rstrip("/") + path, tls)

    @property
    def host_header(self) -> str:
        default = 443 if self.tls else 80
        return self.host if self.port == default else f"{self.host}:{self.port}"


def build_request(target: Target, body: bytes, headers: dict[str, str]) -> bytes:
    """Serialize one POST request (headers precomputed once, sent verbatim each time)."""
    lines = [f"POST {target.path} HTTP/1.1", f"host: {target.host_header}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    lines += ["content-type: application/json", f"content-length: {len(body)}", "", ""]
    return "\r\n".join(lines).encode("latin-1") + body


# body framing modes
_LENGTH, _CHUNKED, _EOF = 0, 1, 2


class ClientConnection(asyncio.Protocol):
    """A keep-alive connection; call :meth:`request` and await the returned future."""

    def __init__(self) -> None:
        self._transport: asyncio.Transport | None = None
        self._waiter: asyncio.Future[Response] | None = None
        self._buf = bytearray()
        self.closed = False
        self.started = 0.0  # perf_counter() when the in-flight request was written (0.0 when idle)
        self._scan = False
        self._head_done = False
        self._status = 0
        self._mode = _EOF
        self._remaining = 0  # Content-Length left, or bytes left in the current chunk incl. CRLF
        self._in_trailer = False
        self._keep_alive = True
        self._t_first = 0.0
        self._t_delta = 0.0
        self._tail = b""
        self._body = 0

    # --- public API -------------------------------------------------------------------------
    def request(self, data: bytes, scan_stream: bool) -> asyncio.Future[Response]:
        if self._transport is None or self.closed:
            raise ResponseError("connection closed")
        self._reset()
        self._scan = scan_stream
        loop = asyncio.get_running_loop()
        self._waiter = loop.create_future()
        self.started = time.perf_counter()
        self._transport.write(data)
        return self._waiter

    def abort(self, reason: str) -> None:
        self._fail(reason)
        if self._transport is not None:
            self._transport.abort()

    def close(self) -> None:
        self.closed = True
        if self._transport is not None:
            self._transport.close()

    # --- protocol callbacks -----------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's transports are not subclasses

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._transport = None
        if self._waiter is not None and self._head_done and self._mode == _EOF:
            self._finish(time.perf_counter())
        else:
            self._fail(f"connection lost: {exc!r}" if exc else "connection closed by peer")

    def data_received(self, data: bytes) -> None:
        if self._waiter is None:
            return  # unsolicited bytes after a response; ignore
        now = time.perf_counter()
        buf = self._buf
        buf += data
        pos = 0
        if not self._head_done:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > _MAX_HEAD:
                    self.abort("response head too large")
                return
            try:
                self._parse_head(bytes(buf[:end]))
            except (ValueError, IndexError):
                self.abort("malformed response head")
                return
            pos = end + 4
            if self._status < 200:  # 1xx interim response: start over
                del buf[:pos]
                self._reset_head()
                if buf:
                    self.data_received(b"")
                return
            if self._mode == _LENGTH and self._remaining == 0:
                self._finish(now)
                return
        if pos < len(buf) and not self._t_first:
            self._t_first = now
        if self._mode == _CHUNKED:
            self._chunked(buf, pos, now)
            return
        seg = len(buf) - pos
        if self._mode == _LENGTH:
            seg = min(seg, self._remaining)
            self._remaining -= seg
        if self._scan and seg:
            self._payload(buf, pos, pos + seg, now)
        self._body += seg
        buf.clear()
        if self._mode == _LENGTH and self._remaining == 0:
            self._finish(now)

    # --- internals --------------------------------------------------------------------------
    def _reset(self) -> None:
        self._scan = False
        self._reset_head()

    def _reset_head(self) -> None:
        self._head_done = False
        self._status = 0
        self._mode = _EOF
        self._remaining = 0
        self._in_trailer = False
        self._keep_alive = True
        self._t_first = 0.0
        self._t_delta = 0.0
        self._tail = b""
        self._body = 0

    def _parse_head(self, head: bytes) -> None:
        lines = head.split(b"\r\n")
        version, status = lines[0].split(b" ", 2)[:2]
        self._status = int(status)
        self._keep_alive = version == b"HTTP/1.1"
        mode = _EOF
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length" and mode != _CHUNKED:
                mode = _LENGTH
                self._remaining = int(value)
            elif name == b"transfer-encoding" and b"chunked" in value.lower():
                mode = _CHUNKED
                self._remaining = 0
            elif name == b"connection":
                token = value.strip().lower()
                self._keep_alive = token == b"keep-alive" or (self._keep_alive and token != b"close")
        if self._status in (204, 304):
            mode, self._remaining = _LENGTH, 0
        self._mode = mode
        self._head_done = True

    def _chunked(self, buf: bytearray, pos: int, now: float) -> None:
        end = len(buf)
        while pos < end:
            if self._in_trailer:
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    break
                if eol == pos:  # empty line ends the message
                    buf.clear()
                    self._finish(now)
                    return
                pos = eol + 2
            elif self._remaining:
                take = min(self._remaining, end - pos)
                data_len = min(take, self._remaining - 2)  # exclude the chunk's trailing CRLF
                if data_len > 0:
                    if self._scan:
                        self._payload(buf, pos, pos + data_len, now)
                    self._body += data_len
                self._remaining -= take
                pos += take
            else:
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    break
                try:
                    size = int(bytes(buf[pos:eol]).split(b";", 1)[0], 16)
                except ValueError:
                    self.abort("malformed chunk size")
                    return
                pos = eol + 2
                if size == 0:
                    self._in_trailer = True
                else:
                    self._remaining = size + 2
        del buf[:pos]

    def _payload(self, buf: bytearray, start: int, stop: int, now: float) -> None:
        if not self._t_delta:
            window = self._tail + bytes(buf[start:stop])
            if DELTA_MARKER in window:
                self._t_delta = now
            self._tail = window[-_TAIL:]
        else:
            n = stop - start
            self._tail = (
                bytes(buf[start:stop]) if n >= _TAIL else (self._tail + bytes(buf[start:stop]))[-_TAIL:]
            )

    def _finish(self, now: float) -> None:
        waiter = self._waiter
        self._waiter = None
        self.started = 0.0
        if waiter is not None and not waiter.done():
            complete = STREAM_END_MARKER in self._tail if self._scan else True
            waiter.set_result(Response(self._status, self._t_first, self._t_delta, now, self._body, complete))
        if not self._keep_alive:
            self.close()

    def _fail(self, reason: str) -> None:
        waiter = self._waiter
        self._waiter = None
        self.started = 0.0
        if waiter is not None and not waiter.done():
            waiter.set_exception(ResponseError(reason))


async def connect(target: Target) -> ClientConnection:
    loop = asyncio.get_running_loop()
    ctx = ssl.create_default_context() if target.tls else None
    _, proto = await loop.create_connection(ClientConnection, target.host, target.port, ssl=ctx)
    return proto
