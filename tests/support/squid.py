"""The Debian squid, started by a test on a free loopback port, with basic proxy authentication.

    async with run_squid(allowed_ports=[emulator.port]) as squid:
        env["HTTPS_PROXY"] = squid.url()            # http://corp-user:<password>@127.0.0.1:<port>
        ...
        squid.connects()                            # ["TCP_TUNNEL/200 CONNECT 127.0.0.1:4711 corp-user", ...]

The configuration (written to a fresh directory under the system temp dir: squid started as root
runs as its ``proxy`` user, which cannot enter pytest's private ``tmp_path``) requires authentication for everything
(``http_access deny !authenticated``, ``basic_ncsa_auth`` over an htpasswd file with an APR1 hash
made by ``openssl passwd -apr1``) and allows CONNECT and plain requests only to
``allowed_ports``: a CONNECT to any other port is 403. squid runs in the foreground (``-N``) with
its own pid file, logs and working directory, no disk cache; it is stopped (its own pid only) when
the block ends. Tests skip, with the reason, when squid or its auth helper is not installed.

``run_reverse_squid(origin_port, extra)`` runs it as a reverse proxy instead (an ingress in front
of a gateway on loopback; no authentication), with ``extra`` configuration lines.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import binaries

SQUID = "/usr/sbin/squid"
NCSA_AUTH = "/usr/lib/squid/basic_ncsa_auth"
USER = "corp-user"


def require_squid() -> None:
    for binary in (SQUID, NCSA_AUTH):
        if not os.access(binary, os.X_OK):
            pytest.skip(binaries.missing_reason(["squid"]))
    binaries.require("openssl")  # hashes the proxy password


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Squid:
    port: int
    password: str
    directory: Path

    def url(self, password: str | None = None) -> str:
        """The proxy URL with credentials (``password`` overrides the right one)."""
        return f"http://{USER}:{password or self.password}@127.0.0.1:{self.port}"

    @property
    def access_log(self) -> Path:
        return self.directory / "access.log"

    def log_lines(self) -> list[str]:
        """squid's access log: ``time elapsed client CODE/status bytes METHOD target user ...``."""
        if not self.access_log.exists():
            return []
        return [line for line in self.access_log.read_text().splitlines() if line.strip()]

    def connects(self) -> list[str]:
        """``"CODE/status CONNECT host:port user"`` for every CONNECT squid logged."""
        out = []
        for line in self.log_lines():
            fields = line.split()
            if len(fields) >= 8 and fields[5] == "CONNECT":
                out.append(f"{fields[3]} CONNECT {fields[6]} {fields[7]}")
        return out

    async def wait_for_log(
        self, predicate: str, count: int = 1, *, since: int = 0, within_s: float = 5.0
    ) -> list[str]:
        """The log lines from index ``since`` on, once ``count`` of them contain ``predicate``
        (squid logs a tunnel when it closes), or whatever is there after ``within_s``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within_s
        while True:
            lines = self.log_lines()[since:]
            if sum(predicate in line for line in lines) >= count or loop.time() >= deadline:
                return lines
            await asyncio.sleep(0.05)


def _common(directory: Path) -> str:
    """The lines every test squid has: its files in ``directory``, no cache, a quick shutdown."""
    return f"""visible_hostname switchyard-test-squid
pid_filename {directory}/squid.pid
access_log stdio:{directory}/access.log squid
cache_log {directory}/cache.log
cache_store_log none
cache deny all
coredump_dir {directory}
pinger_enable off
shutdown_lifetime 0 seconds
"""


def _config(directory: Path, port: int, allowed_ports: Iterable[int]) -> str:
    ports = " ".join(str(p) for p in sorted(set(allowed_ports))) or "1"
    return f"""
http_port 127.0.0.1:{port}
{_common(directory)}auth_param basic program {NCSA_AUTH} {directory}/passwd
auth_param basic children 2 startup=1 idle=1
auth_param basic realm switchyard-test
auth_param basic credentialsttl 1 second
acl authenticated proxy_auth REQUIRED
acl CONNECT method CONNECT
acl allowed_ports port {ports}
http_access deny !authenticated
http_access deny CONNECT !allowed_ports
http_access allow allowed_ports
http_access deny all
"""


async def _listening(port: int) -> bool:
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


def _start(allowed_ports: Iterable[int]) -> tuple[subprocess.Popen[bytes], Squid]:
    """Write the password file and configuration, start squid (not yet listening)."""
    directory = Path(tempfile.mkdtemp(prefix="switchyard-squid-"))
    password = "pw-" + secrets.token_hex(8)
    hashed = subprocess.run(
        ["openssl", "passwd", "-apr1", password], capture_output=True, text=True, check=True, timeout=10
    ).stdout.strip()
    (directory / "passwd").write_text(f"{USER}:{hashed}\n")
    port = free_port()
    return _launch(directory, _config(directory, port, allowed_ports), Squid(port, password, directory))


def _launch(directory: Path, config_text: str, squid: Squid) -> tuple[subprocess.Popen[bytes], Squid]:
    config = directory / "squid.conf"
    config.write_text(config_text)
    directory.chmod(0o777)  # squid started as root drops to its 'proxy' user for logs and helpers
    for name in ("passwd", "squid.conf"):
        if (directory / name).exists():
            (directory / name).chmod(0o644)
    with (directory / "stderr.log").open("wb") as stderr:
        process = subprocess.Popen(
            [SQUID, "-N", "-f", str(config)], stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True
        )
    return process, squid


def _accel_config(directory: Path, port: int, origin_port: int, extra: str) -> str:
    return f"""
http_port 127.0.0.1:{port} accel defaultsite=gateway
cache_peer 127.0.0.1 parent {origin_port} 0 no-query no-digest originserver name=gateway
tcp_outgoing_address 127.0.0.1
{_common(directory)}acl everyone src all
http_access allow everyone
cache_peer_access gateway allow everyone
{extra}
"""


def _start_accel(origin_port: int, extra: str) -> tuple[subprocess.Popen[bytes], Squid]:
    directory = Path(tempfile.mkdtemp(prefix="switchyard-squid-"))
    port = free_port()
    config = _accel_config(directory, port, origin_port, extra)
    return _launch(directory, config, Squid(port=port, password="", directory=directory))


def _startup_log(directory: Path) -> str:
    return "".join(
        (directory / name).read_text(errors="replace")
        for name in ("stderr.log", "cache.log")
        if (directory / name).exists()
    )


def _stop(process: subprocess.Popen[bytes], directory: Path) -> None:
    """Stop the squid this module started (its own pid only) and remove its directory."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
    shutil.rmtree(directory, ignore_errors=True)


@contextlib.asynccontextmanager
async def run_squid(allowed_ports: Iterable[int]) -> AsyncIterator[Squid]:
    require_squid()
    async with _running(await asyncio.to_thread(_start, allowed_ports)) as squid:
        yield squid


@contextlib.asynccontextmanager
async def run_reverse_squid(origin_port: int, extra: str = "") -> AsyncIterator[Squid]:
    """squid as a reverse proxy (``accel``: an ingress) in front of ``http://127.0.0.1:<origin_port>``,
    for anyone, reaching the origin from 127.0.0.1; ``extra``: more configuration lines (e.g.
    ``request_header_add``). Its ``url()`` has no credentials: use ``http://127.0.0.1:<port>``."""
    if not os.access(SQUID, os.X_OK):
        pytest.skip(binaries.missing_reason(["squid"]))
    async with _running(await asyncio.to_thread(_start_accel, origin_port, extra)) as squid:
        yield squid


@contextlib.asynccontextmanager
async def _running(started: tuple[subprocess.Popen[bytes], Squid]) -> AsyncIterator[Squid]:
    process, squid = started
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 15
        while not await _listening(squid.port):
            if process.poll() is not None or loop.time() > deadline:
                log = await asyncio.to_thread(_startup_log, squid.directory)
                raise RuntimeError(f"squid did not start (exit {process.poll()}): {log[-2000:]}")
            await asyncio.sleep(0.05)
        yield squid
    finally:
        await asyncio.to_thread(_stop, process, squid.directory)
