"""The servers under test, spawned the same way: the gateway and the bare aiohttp pass-through.

Each runs as its own process on a free loopback port with its output in a temporary log file;
start-up is timed from spawn to the first ``POST /v1/messages`` answered 200.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO

from bench import processes
from bench.loadgen import LoadConfig


@dataclass
class Server:
    name: str
    proc: subprocess.Popen[bytes]
    url: str
    startup_s: float  # spawn -> first served 200
    log: IO[bytes]
    log_path: Path

    def close(self, keep_log: bool = False) -> None:
        """Stop the process; keep its log if ``keep_log`` and it is not empty, else remove it."""
        processes.stop(self.proc)
        self.log.close()
        if keep_log and self.log_path.stat().st_size > 0:
            print(f"{self.name} log kept at {self.log_path}", file=sys.stderr, flush=True)
        else:
            self.log_path.unlink(missing_ok=True)


def spawn(
    name: str,
    cmd: Sequence[str],
    env: dict[str, str],
    url: str,
    probe: LoadConfig,
    timeout: float,
    cpus: set[int] | None,
) -> Server:
    """Start ``cmd``; return once it has answered a ``POST /v1/messages`` with 200 (``probe``'s
    headers, sent to ``url``)."""
    log = tempfile.NamedTemporaryFile(prefix=f"switchyard-bench-{name}-", suffix=".log", delete=False)  # noqa: SIM115
    log_path = Path(log.name)
    proc, t0 = processes.start_gateway(cmd, env, log, cpus)
    print(f"{name}: {shlex.join(cmd)} on {url} (pid {proc.pid}, log {log_path})", file=sys.stderr, flush=True)
    try:
        startup = processes.wait_first_served(proc, replace(probe, url=url), t0, timeout)
    except processes.BenchError as exc:
        processes.stop(proc)
        log.close()
        raise processes.BenchError(
            f"{name}: {exc}\n--- {name} log ({log_path}) tail ---\n{processes.log_tail(log_path)}"
        ) from exc
    print(f"{name} served its first request after {startup:.3f}s", file=sys.stderr, flush=True)
    return Server(name, proc, url, startup, log, log_path)


def spawn_gateway(
    cmd: Sequence[str],
    env: dict[str, str],
    probe: LoadConfig,
    timeout: float,
    cpus: set[int] | None = None,
    port: int | None = None,
) -> Server:
    """Our gateway on ``port`` (default: a free one); ``env`` adds to ``GATEWAY_HOST``/``GATEWAY_PORT``
    and an upstream key (it needs ``GATEWAY_API_KEYS`` and ``ANTHROPIC_BASE_URL``)."""
    port = port or processes.free_port()
    full_env = {
        "GATEWAY_HOST": "127.0.0.1",
        "GATEWAY_PORT": str(port),
        "ANTHROPIC_API_KEY": "upstream-key",
        **env,
    }
    return spawn("gateway", cmd, full_env, f"http://127.0.0.1:{port}", probe, timeout, cpus)


def spawn_passthrough(
    upstream_url: str, probe: LoadConfig, timeout: float, cpus: set[int] | None = None
) -> Server:
    """The bare aiohttp pass-through (:mod:`bench.passthrough`) in front of ``upstream_url``."""
    port = processes.free_port()
    cmd = processes.passthrough_cmd(upstream_url, port)
    return spawn("passthrough", cmd, {}, f"http://127.0.0.1:{port}", probe, timeout, cpus)


def env_pair(raw: str) -> tuple[str, str]:
    """``KEY=VALUE`` from the command line (``--gateway-env``)."""
    key, sep, value = raw.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {raw!r}")
    return key, value


def add_gateway_args(p: argparse.ArgumentParser) -> None:
    """``--gateway-cmd`` and ``--gateway-env``: how the spawned gateway is started."""
    p.add_argument(
        "--gateway-cmd",
        type=shlex.split,
        default=[sys.executable, "-m", "gateway", "serve"],
        help="command that starts the gateway (default: '<python> -m gateway serve')",
    )
    p.add_argument(
        "--gateway-env", type=env_pair, action="append", default=[], help="extra KEY=VALUE for the gateway"
    )
