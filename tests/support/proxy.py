"""A minimal HTTP forward proxy on loopback (CONNECT tunnels and absolute-URI requests).

Records what it was asked to do, so tests can prove the gateway's egress went through it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit


@dataclass
class ForwardProxy:
    seen: list[str] = field(default_factory=list)  # request lines, e.g. "CONNECT 127.0.0.1:443"
    proxy_authorization: list[str] = field(default_factory=list)
    port: int = 0
    refuse_connects_after: int | None = None  # answer later CONNECTs with ``refusal``
    refusal: bytes = b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while chunk := await reader.read(65536):
                writer.write(chunk)
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()
            return
        lines = head.decode("latin-1").split("\r\n")
        method, target, _version = lines[0].split(" ", 2)
        self.seen.append(f"{method} {target}")
        for line in lines[1:]:
            if line.lower().startswith("proxy-authorization:"):
                self.proxy_authorization.append(line.split(":", 1)[1].strip())
        if method == "CONNECT":
            connects = sum(seen.startswith("CONNECT ") for seen in self.seen)
            if self.refuse_connects_after is not None and connects > self.refuse_connects_after:
                writer.write(self.refusal)
                await writer.drain()
                writer.close()
                return
            host, _, port = target.rpartition(":")
            upstream_reader, upstream_writer = await asyncio.open_connection(host, int(port))
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await writer.drain()
        else:
            parts = urlsplit(target)
            upstream_reader, upstream_writer = await asyncio.open_connection(parts.hostname, parts.port or 80)
            path = parts.path + (f"?{parts.query}" if parts.query else "")
            rewritten = [f"{method} {path} HTTP/1.1"] + [
                line for line in lines[1:] if not line.lower().startswith("proxy-")
            ]
            upstream_writer.write("\r\n".join(rewritten).encode("latin-1"))
        await asyncio.gather(self._pipe(reader, upstream_writer), self._pipe(upstream_reader, writer))


@contextlib.asynccontextmanager
async def forward_proxy() -> AsyncIterator[ForwardProxy]:
    proxy = ForwardProxy()
    server = await asyncio.start_server(proxy._handle, "127.0.0.1", 0)
    proxy.port = server.sockets[0].getsockname()[1]
    try:
        yield proxy
    finally:
        server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.wait_closed(), 2)
