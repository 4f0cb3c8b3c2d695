"""A throwaway redis-server on a loopback port, without persistence (tests that need a real Redis).

``RedisServer.start`` waits until the server answers ``PING`` (after ``AUTH`` when it has a
password); ``stop``/``start`` keep the port, so a test can restart it under a running client.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support import binaries


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def redis_binary() -> str:
    """The redis-server binary, or a skip of the calling test."""
    return binaries.require("redis-server")


@dataclass
class RedisServer:
    """One redis-server process; ``password`` sets ``requirepass``, ``directory`` its ``--dir``."""

    binary: str
    port: int = field(default_factory=free_port)
    password: str | None = None
    directory: Path | None = None
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        userinfo = f":{self.password}@" if self.password else ""
        return f"redis://{userinfo}127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 20.0) -> None:
        assert self.process is None
        command = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1"]
        command += ["--save", "", "--appendonly", "no"]
        if self.password:
            command += ["--requirepass", self.password]
        if self.directory is not None:
            command += ["--dir", str(self.directory)]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        hello = (f"AUTH {self.password}\r\n" if self.password else "") + "PING\r\n"
        deadline = time.monotonic() + timeout_s
        while True:
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), 0.2) as sock,
            ):
                sock.sendall(hello.encode())
                replies = b""
                while b"+PONG" not in replies and (chunk := sock.recv(64)):
                    replies += chunk
                if b"+PONG" in replies:
                    return
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"redis-server did not start on port {self.port}")
            time.sleep(0.02)

    def stop(self) -> None:
        """Terminate the server (SIGTERM) and wait for it to exit."""
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
        self.process = None

    def client(self) -> Any:
        import redis.asyncio

        return redis.asyncio.Redis.from_url(self.url)


@contextlib.contextmanager
def running_redis(directory: Path | None = None, password: str | None = None) -> Iterator[RedisServer]:
    """A started server (the test is skipped without redis-server), stopped afterwards."""
    server = RedisServer(redis_binary(), password=password, directory=directory)
    server.start()
    try:
        yield server
    finally:
        server.stop()
