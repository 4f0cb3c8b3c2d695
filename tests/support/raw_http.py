"""A minimal HTTP/1.1 client over a plain socket, for hostile-input tests.

It sends exactly the bytes it is given (header values that are not UTF-8, bodies that lie about
their encoding, malformed request lines) and reads one response back: status, headers, body
(``Content-Length``, chunked, or up to the close). A ``RawConnection`` keeps the connection alive
between requests and reopens it when the server closed it.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import orjson

HeaderValue = str | bytes


@dataclass(frozen=True, slots=True)
class RawResponse:
    status: int
    headers: list[tuple[str, str]]  # names lower-cased, values latin-1 decoded
    body: bytes
    version: str = "HTTP/1.1"

    def header(self, name: str) -> str | None:
        for key, value in self.headers:
            if key == name:
                return value
        return None

    def json(self) -> Any:
        return orjson.loads(self.body)

    @property
    def closes(self) -> bool:
        """The server closes the connection after this answer."""
        connection = (self.header("connection") or "").lower()
        return connection == "close" or (self.version == "HTTP/1.0" and connection != "keep-alive")


def request_bytes(
    method: str,
    target: str | bytes,
    headers: Iterable[tuple[str | bytes, HeaderValue]] = (),
    body: bytes | None = None,
    *,
    content_length: bool = True,
) -> bytes:
    """One request as bytes; ``Content-Length`` is added for a body unless ``content_length=False``."""
    raw_target = target.encode() if isinstance(target, str) else target
    lines = [method.encode() + b" " + raw_target + b" HTTP/1.1", b"Host: 127.0.0.1"]
    for name, value in headers:
        raw_name = name.encode() if isinstance(name, str) else name
        raw_value = value.encode() if isinstance(value, str) else value
        lines.append(raw_name + b": " + raw_value)
    if body is not None and content_length:
        lines.append(b"Content-Length: " + str(len(body)).encode())
    return b"\r\n".join(lines) + b"\r\n\r\n" + (body or b"")


class RawConnection:
    """A keep-alive connection to ``host:port`` that sends raw bytes and reads one response."""

    def __init__(self, host: str, port: int, timeout_s: float = 30.0) -> None:
        self.host, self.port, self.timeout_s = host, port, timeout_s
        self._sock: socket.socket | None = None
        self._file: Any = None

    def _open(self) -> None:
        sock = socket.create_connection((self.host, self.port), timeout=self.timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock, self._file = sock, sock.makefile("rb")

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
        if self._sock is not None:
            self._sock.close()
        self._sock = self._file = None

    def send(self, data: bytes, *, head: bool = False) -> RawResponse:
        """Send ``data`` (one whole request) and read the response; ``head``: it has no body."""
        if self._sock is None:
            self._open()
        assert self._sock is not None
        try:
            self._sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):  # the server closed the idle connection
            self.close()
            self._open()
            assert self._sock is not None
            self._sock.sendall(data)
        response = read_response(self._file, head=head)
        if response.closes:
            self.close()
        return response


def read_response(stream: Any, *, head: bool = False) -> RawResponse:
    """One final response (interim ``1xx`` answers, such as ``100 Continue``, are skipped)."""
    while True:
        response = _read_one(stream, head=head)
        if not 100 <= response.status < 200:
            return response


def _read_one(stream: Any, *, head: bool) -> RawResponse:
    status_line = stream.readline()
    if not status_line:
        raise ConnectionError("the server closed the connection without answering")
    parts = status_line.split(b" ", 2)
    version, status = parts[0].decode("latin-1"), int(parts[1])
    headers: list[tuple[str, str]] = []
    while True:
        line = stream.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        name, _, value = line.decode("latin-1").partition(":")
        headers.append((name.strip().lower(), value.strip()))
    found = dict(headers)
    if head or status in (204, 304) or 100 <= status < 200:
        body = b""
    elif found.get("transfer-encoding", "").lower() == "chunked":
        body = _read_chunked(stream)
    elif "content-length" in found:
        body = stream.read(int(found["content-length"]))
    else:
        body = stream.read()
    return RawResponse(status, headers, body, version)


def _read_chunked(stream: Any) -> bytes:
    pieces = []
    while True:
        size = int(stream.readline().split(b";")[0].strip(), 16)
        if size == 0:
            while stream.readline() not in (b"\r\n", b"\n", b""):  # trailers
                pass
            return b"".join(pieces)
        pieces.append(stream.read(size))
        stream.readline()
