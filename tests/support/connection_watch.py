"""A TCP relay on loopback that timestamps the connections a gateway opens to its upstream.

Put between the gateway and a real upstream (the emulator): every connection the gateway opens is
relayed byte for byte, and :class:`WatchedConnection` records when it was opened and when the
gateway's side of it ended (EOF or reset) — what an upstream sees when the gateway closes its
connection. Times are ``time.monotonic()`` readings, comparable with the test's own.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field


@dataclass
class WatchedConnection:
    opened_at: float
    closed_at: float | None = None  # the gateway's side ended (it closed or reset the connection)
    upstream_closed_first: bool = False  # the upstream ended the connection, not the gateway
    bytes_from_gateway: int = 0
    closed: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass
class ConnectionWatch:
    target_host: str
    target_port: int
    port: int = 0
    connections: list[WatchedConnection] = field(default_factory=list)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _new_connection: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def opened(self, count: int = 1, timeout_s: float = 5.0) -> list[WatchedConnection]:
        """Wait until the gateway has opened ``count`` connections; return them."""
        async with asyncio.timeout(timeout_s):
            while len(self.connections) < count:
                self._new_connection.clear()
                await self._new_connection.wait()
        return self.connections[:count]

    async def _relay(
        self, gateway_reader: asyncio.StreamReader, gateway_writer: asyncio.StreamWriter
    ) -> None:
        watched = WatchedConnection(opened_at=time.monotonic())
        self.connections.append(watched)
        self._new_connection.set()
        upstream_reader, upstream_writer = await asyncio.open_connection(self.target_host, self.target_port)

        def gateway_closed() -> None:
            if watched.closed_at is None:
                watched.closed_at = time.monotonic()
            watched.closed.set()

        async def from_gateway() -> None:
            try:
                while chunk := await gateway_reader.read(65536):
                    watched.bytes_from_gateway += len(chunk)
                    upstream_writer.write(chunk)
                    await upstream_writer.drain()
            except ConnectionError:
                pass
            gateway_closed()

        async def from_upstream() -> None:
            while True:
                try:
                    chunk = await upstream_reader.read(65536)
                except ConnectionError:
                    chunk = b""
                if not chunk:
                    if watched.closed_at is None:
                        watched.upstream_closed_first = True
                    return
                try:
                    gateway_writer.write(chunk)
                    await gateway_writer.drain()
                except ConnectionError:  # the gateway's side is gone (reset while we wrote)
                    gateway_closed()
                    return

        tasks = [asyncio.create_task(from_gateway()), asyncio.create_task(from_upstream())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for writer in (gateway_writer, upstream_writer):
                writer.close()
            if watched.closed_at is None:  # the upstream went first: the connection is over too
                watched.closed_at = time.monotonic()
            watched.closed.set()

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.create_task(self._relay(reader, writer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


@contextlib.asynccontextmanager
async def connection_watch(target_host: str, target_port: int) -> AsyncIterator[ConnectionWatch]:
    """A :class:`ConnectionWatch` relaying to ``target_host:target_port`` for the block."""
    watch = ConnectionWatch(target_host, target_port)
    server = await asyncio.start_server(watch._accept, "127.0.0.1", 0)
    watch.port = server.sockets[0].getsockname()[1]
    try:
        yield watch
    finally:
        server.close()
        for task in list(watch._tasks):
            task.cancel()
        await asyncio.gather(*watch._tasks, return_exceptions=True)
        await server.wait_closed()
