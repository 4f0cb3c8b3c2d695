"""A real ``python -m gateway serve`` process for tests that need its own stderr, limits or signals.

Its stderr goes to a file (a pipe nobody reads could fill and stall the log writer thread), read
back with :meth:`GatewayProcess.stderr`. ``nofile`` lowers the child's open-file limit (soft and
hard) before it starts, the way a container or systemd unit would.
"""

from __future__ import annotations

import http.client
import os
import resource
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

HOST = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
    return port


@dataclass
class GatewayProcess:
    process: subprocess.Popen[bytes]
    port: int
    stderr_path: Path

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def open_fds(self) -> int:
        return len(os.listdir(f"/proc/{self.process.pid}/fd"))

    def get(self, path: str, headers: dict[str, str] | None = None, timeout: float = 5.0) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection(HOST, self.port, timeout=timeout)
        try:
            conn.request("GET", path, headers=headers or {})
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()


def _limit_files(nofile: int) -> Callable[[], None]:
    def lower() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    return lower


@contextmanager
def serve_process(
    env: dict[str, str],
    stderr_path: Path,
    *,
    nofile: int | None = None,
    module: tuple[str, ...] = ("gateway", "serve"),
) -> Iterator[GatewayProcess]:
    """Start ``python -m <module>`` (the gateway) with ``env`` (plus PATH, PYTHONPATH and a free
    GATEWAY_PORT) and wait until ``/healthz`` answers; kill it on exit."""
    port = free_port()
    full_env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "GATEWAY_PORT": str(port),
        **({"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {}),
        **env,
    }
    with stderr_path.open("wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", *module],
            env=full_env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            preexec_fn=_limit_files(nofile) if nofile is not None else None,
        )
    gateway = GatewayProcess(process, port, stderr_path)
    try:
        deadline = time.monotonic() + 30
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"gateway exited with {process.returncode}: {gateway.stderr()[-2000:]}")
            try:
                gateway.get("/healthz", timeout=1)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        yield gateway
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(10)
