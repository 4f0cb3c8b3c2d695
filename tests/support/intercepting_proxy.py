"""A TLS-intercepting forward proxy on loopback, as corporate egress appliances do it.

Answers ``CONNECT host:port`` with 200, then terminates the client's TLS itself with a
certificate issued by *its own* CA (``corporate``: a :class:`~tests.support.tls.LocalPKI` whose
server certificate covers ``127.0.0.1`` and ``localhost``) and opens a second TLS connection to
the real target, verified against the target's CA (``upstream_ca``). A client gets through only
if it trusts the corporate CA, which is what ``GATEWAY_CA_BUNDLE`` is for. Records every CONNECT
target in ``seen``.

(Debian's squid 5.7 is built with GnuTLS, without ``--with-openssl``, so it cannot ssl-bump.)
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.tls import LocalPKI


@dataclass
class InterceptingProxy:
    corporate: LocalPKI
    upstream_ca: Path
    seen: list[str] = field(default_factory=list)
    intercepted: int = 0  # tunnels whose client completed the handshake with the corporate cert
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while chunk := await reader.read(65536):
                writer.write(chunk)
                await writer.drain()
        except (ConnectionError, ssl.SSLError, asyncio.CancelledError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            method, target, _ = head.decode("latin-1").split("\r\n", 1)[0].split(" ", 2)
            self.seen.append(f"{method} {target}")
            if method != "CONNECT":
                writer.write(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
                await writer.drain()
                writer.close()
                return
            host, _, port = target.rpartition(":")
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await writer.drain()
            await writer.start_tls(self.corporate.server_context(require_client_cert=False))
            self.intercepted += 1
            client_side = ssl.create_default_context(cafile=str(self.upstream_ca))
            up_reader, up_writer = await asyncio.open_connection(
                host.strip("[]"), int(port), ssl=client_side, server_hostname=host.strip("[]")
            )
        except (OSError, ssl.SSLError, ValueError, asyncio.IncompleteReadError):
            with contextlib.suppress(Exception):
                writer.close()
            return
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))


@contextlib.asynccontextmanager
async def intercepting_proxy(corporate: LocalPKI, upstream_ca: Path) -> AsyncIterator[InterceptingProxy]:
    proxy = InterceptingProxy(corporate, upstream_ca)
    server = await asyncio.start_server(proxy._handle, "127.0.0.1", 0)
    proxy.port = server.sockets[0].getsockname()[1]
    try:
        yield proxy
    finally:
        server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.wait_closed(), 2)
