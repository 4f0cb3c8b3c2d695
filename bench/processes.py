"""Spawning and stopping the benchmark's child processes: fake upstream, gateway, pass-through,
load generators.

Every child is started with ``python -m bench ...`` (or the gateway command) so it gets its
own interpreter and event loop; optional CPU pinning is applied before ``exec`` so every thread a
child later starts inherits it.
"""

from __future__ import annotations

import compileall
import contextlib
import http.client
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO

from bench import REPO_ROOT, payloads
from bench.client import Target
from bench.loadgen import LoadConfig


class BenchError(RuntimeError):
    """A child process failed to start or misbehaved."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


def _pin(cpus: set[int] | None) -> Callable[[], None] | None:
    if not cpus:
        return None
    frozen = set(cpus)

    def apply() -> None:
        os.sched_setaffinity(0, frozen)

    return apply


def _bench_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "bench", *args]


def start_upstream(
    port: int = 0,
    deltas: int = payloads.DEFAULT_DELTAS,
    event_delay: float = 0.0,
    cpus: set[int] | None = None,
) -> tuple[subprocess.Popen[bytes], int]:
    """Start the fake upstream; returns once it listens, with the port it bound."""
    cmd = _bench_cmd(
        "upstream", "--port", str(port), "--deltas", str(deltas), "--event-delay", str(event_delay)
    )
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, preexec_fn=_pin(cpus), cwd=REPO_ROOT
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().decode().strip()
    if not line.startswith("READY "):
        stop(proc)
        raise BenchError(f"fake upstream did not start (said {line!r})")
    return proc, int(line.split()[1])


def ensure_bytecode(packages: Sequence[str] = ("gateway",)) -> None:
    """Compile the gateway's bytecode (``__pycache__``) if it is missing or stale, as an installed
    gateway has it (the image compiles it at build time): with ``PYTHONDONTWRITEBYTECODE`` set and
    no ``.pyc``, every start-up would compile every module again and be timed doing so."""
    for package in packages:
        compileall.compile_dir(REPO_ROOT / package, quiet=1)


def start_gateway(
    cmd: Sequence[str], env: dict[str, str], log: IO[bytes], cpus: set[int] | None = None
) -> tuple[subprocess.Popen[bytes], float]:
    """Spawn the gateway; returns the process and the perf_counter() value at spawn."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        list(cmd),
        env={**os.environ, **env},
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        preexec_fn=_pin(cpus),
        cwd=REPO_ROOT,  # the pass-through is ``python -m bench``
    )
    return proc, t0


def passthrough_cmd(upstream_url: str, port: int) -> list[str]:
    """The command that starts the bare aiohttp pass-through (:mod:`bench.passthrough`)."""
    return _bench_cmd("passthrough", "--upstream", upstream_url, "--port", str(port))


def post_once(cfg: LoadConfig, timeout: float = 5.0) -> int:
    """One blocking non-streaming POST /v1/messages; returns the HTTP status."""
    target = Target.parse(cfg.url)
    conn_cls = http.client.HTTPSConnection if target.tls else http.client.HTTPConnection
    conn = conn_cls(target.host, target.port, timeout=timeout)
    try:
        conn.request("POST", target.path, body=payloads.request_body(False), headers=cfg.headers())
        resp = conn.getresponse()
        resp.read()
        return resp.status
    finally:
        conn.close()


def wait_first_served(
    proc: subprocess.Popen[bytes] | None, cfg: LoadConfig, t0: float, timeout: float
) -> float:
    """Poll with POST /v1/messages until one returns 200; seconds from ``t0`` to that response."""
    deadline = t0 + timeout
    last = "no attempt"
    while time.perf_counter() < deadline:
        if proc is not None and proc.poll() is not None:
            raise BenchError(f"gateway exited with status {proc.returncode} before serving a request")
        try:
            status = post_once(cfg, timeout=max(0.5, deadline - time.perf_counter()))
        except (OSError, http.client.HTTPException) as exc:
            last = f"{type(exc).__name__}: {exc}"
        else:
            if status == 200:
                return time.perf_counter() - t0
            last = f"HTTP {status}"
        time.sleep(0.005)
    raise BenchError(f"no successful POST /v1/messages within {timeout:.0f}s (last: {last})")


def start_loadgens(
    cfg: LoadConfig, processes: int, out_dir: Path, cpus: set[int] | None = None
) -> list[tuple[subprocess.Popen[bytes], Path]]:
    """Spawn load generator processes sharing ``cfg.concurrency``; each waits for a start time on
    stdin and writes its samples to its own JSON file in ``out_dir``."""
    n = max(1, min(processes, cfg.concurrency))
    shares = [cfg.concurrency // n + (1 if i < cfg.concurrency % n else 0) for i in range(n)]
    procs = []
    for i, conc in enumerate(shares):
        out = out_dir / f"loadgen-{i}.json"
        cmd = _bench_cmd(
            "loadgen",
            "--url", cfg.url,
            "--mode", cfg.mode,
            "--concurrency", str(conc),
            "--duration", str(cfg.duration),
            "--warmup", str(cfg.warmup),
            "--api-key", cfg.api_key,
            "--auth-header", cfg.auth_header,
            "--timeout", str(cfg.timeout),
            "--wait-start",
            "--samples-out", str(out),
            *(("--keys-file", cfg.keys_file) if cfg.keys_file else ()),
        )  # fmt: skip
        proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, preexec_fn=_pin(cpus), cwd=REPO_ROOT
        )
        procs.append((proc, out))
    for p, _ in procs:
        assert p.stdout is not None
        if p.stdout.readline().strip() != b"READY":
            for q, _ in procs:
                stop(q)
            raise BenchError("a load generator process failed to start")
    return procs


def release_loadgens(procs: Sequence[subprocess.Popen[bytes]], delay: float = 0.05) -> float:
    """Tell every waiting load generator to start at the same wall-clock time; returns that time."""
    start_at = time.time() + delay
    for p in procs:
        assert p.stdin is not None
        p.stdin.write(f"{start_at!r}\n".encode())
        p.stdin.close()
    return start_at


def collect_output(proc: subprocess.Popen[bytes], out: Path, timeout: float) -> bytes:
    """Wait for a load generator to exit and return the samples file it wrote."""
    proc.wait(timeout=timeout)
    if proc.returncode != 0:
        raise BenchError(f"load generator exited with status {proc.returncode}")
    return out.read_bytes()


def stop(proc: subprocess.Popen[bytes], grace: float = 5.0) -> None:
    """SIGTERM, then SIGKILL after ``grace`` seconds; safe on processes that already exited."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
