"""The soak's processes: the emulator (``python -m emulators``) and the gateway (``switchyard
serve``), each its own process with enough open files, and readings of their memory and files.

Both children inherit this process's ``RLIMIT_NOFILE``, so :func:`raise_open_files` runs first.
The gateway gets a clean environment (no inherited ``GATEWAY_*``/``ANTHROPIC_*``/cloud/proxy
variables) plus the emulator as its upstream and pool and connection caps that admit every stream
of the run; a cap the gateway does not know (an older checkout) is left out, since the
``GATEWAY_*`` namespace is closed.
"""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from bench import REPO_ROOT, procinfo
from bench.latency_paths import INHERITED_OUT, PROXY_VARS
from bench.loadgen import LoadConfig
from bench.processes import BenchError, free_port, log_tail, stop, wait_first_served
from gateway.config import Settings
from gateway.config_checks import alias_index

CLIENT_KEY = "soak-client-key"
UPSTREAM_KEY = "soak-upstream-key"
_READY = re.compile(r"emulator on (http://\S+)")


_T0 = time.monotonic()


def progress(msg: str) -> None:
    """A progress line on stderr, stamped with the seconds since the soak started."""
    print(f"[{time.monotonic() - _T0:7.1f}s] {msg}", file=sys.stderr, flush=True)


def raise_open_files(needed: int) -> int:
    """Raise this process's soft ``RLIMIT_NOFILE`` to at least ``needed`` (children inherit it);
    returns the new soft limit. Fails when the hard limit is lower."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft >= needed:
        return soft
    if hard != resource.RLIM_INFINITY and hard < needed:
        raise BenchError(
            f"the soak needs {needed} open files per process but the hard limit is {hard}: "
            "raise it (ulimit -Hn) or run fewer --streams"
        )
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    return needed


def open_files(pid: int) -> int:
    """How many file descriptors ``pid`` holds (0 once it has exited)."""
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


@dataclass
class Child:
    """A spawned process with its output in a temporary log file."""

    name: str
    proc: subprocess.Popen[bytes]
    url: str
    log: IO[bytes]
    log_path: Path
    _pids: list[int] | None = field(default=None, init=False, repr=False)

    def pids(self) -> list[int]:
        """The process and its children, found once (scanning /proc is not free; neither the
        gateway nor the emulator starts processes once it serves)."""
        if self._pids is None:
            self._pids = procinfo.descendants(self.proc.pid)
        return self._pids

    def rss_mb(self) -> float:
        return procinfo.rss_mb(self.pids())

    def open_files(self) -> int:
        return sum(open_files(pid) for pid in self.pids())

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        stop(self.proc)
        self.log.close()

    def drop_log(self, keep_log: bool) -> None:
        if keep_log:
            progress(f"{self.name} log kept at {self.log_path}")
        else:
            self.log_path.unlink(missing_ok=True)


def _clean_environ(base: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in base.items() if not k.startswith(INHERITED_OUT) and k.lower() not in PROXY_VARS}


def _spawn(
    name: str, cmd: Sequence[str], env: Mapping[str, str]
) -> tuple[subprocess.Popen[bytes], IO[bytes], Path]:
    log = tempfile.NamedTemporaryFile(prefix=f"switchyard-soak-{name}-", suffix=".log", delete=False)  # noqa: SIM115
    proc = subprocess.Popen(
        list(cmd), env=dict(env), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=REPO_ROOT
    )
    return proc, log, Path(log.name)


def _emulator(interval_s: float, port: int) -> Child:
    cmd = [
        sys.executable, "-m", "emulators", "--port", str(port),
        "--chunk-delay", repr(interval_s), "--api-key", UPSTREAM_KEY,
    ]  # fmt: skip
    proc, log, path = _spawn("emulator", cmd, _clean_environ(os.environ))
    return Child("emulator", proc, f"http://127.0.0.1:{port}", log, path)


def _await_emulator(emulator: Child, deadline: float) -> None:
    """Wait for the emulator's ``... emulator on URL`` line."""
    while time.monotonic() < deadline:
        found = _READY.search(emulator.log_path.read_text(errors="replace"))
        if found:
            if found.group(1) != emulator.url:
                raise BenchError(f"the emulator listens on {found.group(1)}, not {emulator.url}")
            progress(f"emulator: pid {emulator.proc.pid} on {emulator.url} (log {emulator.log_path})")
            return
        if not emulator.alive():
            break
        time.sleep(0.05)
    raise BenchError(f"the emulator did not start:\n{log_tail(emulator.log_path)}")


def gateway_caps(streams: int) -> dict[str, str]:
    """Upstream pool and connection caps admitting ``streams`` concurrent streams with room to
    spare, limited to the variables this checkout's gateway reads."""
    pool = streams + 256
    wanted = {
        "GATEWAY_UPSTREAM_POOL_SIZE": pool,
        "GATEWAY_TEAM_MAX_INFLIGHT": pool,
        "GATEWAY_MAX_CONNECTIONS": streams + 512,
        "GATEWAY_MAX_INCOMPLETE_CONNECTIONS": streams + 512,
    }
    known = alias_index(Settings)
    return {name: str(value) for name, value in wanted.items() if name in known}


def _gateway(
    cmd: Sequence[str], emulator_url: str, extra_env: Mapping[str, str], streams: int, port: int
) -> tuple[Child, dict[str, str]]:
    settings = {
        "GATEWAY_HOST": "127.0.0.1",
        "GATEWAY_PORT": str(port),
        "GATEWAY_API_KEYS": CLIENT_KEY,
        "GATEWAY_PROVIDER": "anthropic",
        "ANTHROPIC_BASE_URL": emulator_url,
        **gateway_caps(streams),
        **extra_env,
    }
    env = {**_clean_environ(os.environ), **settings, "ANTHROPIC_API_KEY": UPSTREAM_KEY}
    proc, log, path = _spawn("gateway", cmd, env)
    return Child("gateway", proc, f"http://127.0.0.1:{port}", log, path), settings


def _await_gateway(gateway: Child, t0: float, timeout: float) -> None:
    try:
        startup = wait_first_served(
            gateway.proc, LoadConfig(url=gateway.url, api_key=CLIENT_KEY), t0, timeout
        )
    except BenchError as exc:
        raise BenchError(f"gateway: {exc}\n--- gateway log tail ---\n{log_tail(gateway.log_path)}") from exc
    progress(
        f"gateway: pid {gateway.proc.pid} on {gateway.url}, first request served {startup:.2f}s after spawn "
        f"(log {gateway.log_path})"
    )


def _stop_all(children: Sequence[Child]) -> None:
    for child in children:
        child.stop()
        child.drop_log(keep_log=True)


def start(
    interval_s: float, cmd: Sequence[str], extra_env: Mapping[str, str], streams: int, timeout: float
) -> tuple[Child, Child, dict[str, str]]:
    """The emulator (``python -m emulators --chunk-delay interval_s``) and the gateway in front of
    it, started side by side; returns once the emulator listens and the gateway has answered a
    request with 200: ``(emulator, gateway, the gateway's settings but its upstream key)``."""
    emulator_port = free_port()
    gateway_port = free_port()
    while gateway_port == emulator_port:
        gateway_port = free_port()
    t0 = time.perf_counter()
    emulator = _emulator(interval_s, emulator_port)
    gateway, settings = _gateway(cmd, emulator.url, extra_env, streams, gateway_port)
    try:
        _await_emulator(emulator, time.monotonic() + timeout)
        _await_gateway(gateway, t0, timeout)
    except BaseException:
        _stop_all([gateway, emulator])
        raise
    return emulator, gateway, settings


def start_gateway(
    emulator: Child, cmd: Sequence[str], extra_env: Mapping[str, str], streams: int, timeout: float
) -> Child:
    """Another gateway in front of the running emulator (same settings, a new port)."""
    t0 = time.perf_counter()
    gateway, _ = _gateway(cmd, emulator.url, extra_env, streams, free_port())
    try:
        _await_gateway(gateway, t0, timeout)
    except BaseException:
        _stop_all([gateway])
        raise
    return gateway


def cpu_seconds(children: Mapping[str, Child]) -> dict[str, float]:
    """User + system CPU seconds so far: each child's process tree, this process (``client``)
    and the whole machine (``machine``, every core)."""
    out = {}
    for name, child in children.items():
        ticks = (procinfo.process_ticks(pid) for pid in child.pids())
        out[name] = sum(t for t in ticks if t is not None) / procinfo.CLK_TCK
    times = os.times()
    out["client"] = times.user + times.system
    out["machine"] = procinfo.machine_busy_seconds()
    return out


def cpu_percent(before: Mapping[str, float], after: Mapping[str, float], wall_s: float) -> dict[str, float]:
    """CPU use between two :func:`cpu_seconds` readings, in % of one core."""
    return (
        {name: 100.0 * (after[name] - before.get(name, 0.0)) / wall_s for name in after} if wall_s > 0 else {}
    )


@dataclass(frozen=True)
class LogScan:
    lines: int
    errors: int  # lines logged at ERROR or CRITICAL
    tracebacks: int
    first_problem: str | None


def scan_log(path: Path) -> LogScan:
    """Count the gateway log's lines, ERROR/CRITICAL lines and tracebacks (read line by line)."""
    lines = errors = tracebacks = 0
    first: str | None = None
    with path.open("rb") as fh:
        for raw in fh:
            lines += 1
            is_error = b'"level":"ERROR"' in raw or b'"level":"CRITICAL"' in raw
            is_traceback = raw.startswith(b"Traceback") or b"Traceback (most recent call last)" in raw
            errors += is_error
            tracebacks += is_traceback
            if first is None and (is_error or is_traceback):
                first = raw.decode(errors="replace").strip()[:300]
    return LogScan(lines, errors, tracebacks, first)


def merge_scans(scans: Sequence[LogScan]) -> LogScan:
    """One :class:`LogScan` for several gateways' logs."""
    first = next((s.first_problem for s in scans if s.first_problem), None)
    return LogScan(
        sum(s.lines for s in scans), sum(s.errors for s in scans), sum(s.tracebacks for s in scans), first
    )
