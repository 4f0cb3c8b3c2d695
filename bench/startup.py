"""``python -m bench startup``: the gateway's start-up time, measured the way ``make bench`` does.

Spawns ``python -m gateway serve`` N times against the bench's fake upstream (:mod:`bench.servers`:
spawn -> first ``POST /v1/messages`` answered 200) and prints the median and minimum; then the
load-independent figures of one ``serve``-like start-up in a fresh interpreter: the modules it loads
(``len(sys.modules)``), each phase's time, the heavy optional dependencies it loaded (none expected)
and the top ``-X importtime`` entries. Timings are noisy on a shared machine: compare medians and
minimums, and the module count.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import orjson

from bench import REPO_ROOT, processes, procinfo
from bench.loadgen import LoadConfig
from bench.servers import add_gateway_args, spawn_gateway, spawn_passthrough

# what ``gateway serve`` does before its first request, phase by phase, in a fresh interpreter
# (the app is built but not served: no listener, no event loop)
PROBE = """
import sys, time, orjson
t0 = time.perf_counter(); marks = {}
import gateway.cli
marks["import gateway.cli"] = time.perf_counter()
from gateway.config import Settings
settings = Settings.from_environ(dict(__import__("os").environ), serving=True)
settings.require_startable()
marks["settings"] = time.perf_counter()
import gateway.process, gateway.startup_summary
marks["import gateway.process"] = time.perf_counter()
gateway.startup_summary.public_summary(settings)
from gateway.app import create_app
marks["import gateway.app"] = time.perf_counter()
create_app(settings)
marks["create_app"] = time.perf_counter()
heavy = sorted({m.split(".")[0] for m in sys.modules} & set(sys.argv[1].split(",")))
prev, phases = t0, {}
for name, t in marks.items():
    phases[name] = round((t - prev) * 1000, 1); prev = t
cpu_ms = round(time.process_time() * 1000, 1)
print(orjson.dumps({"modules": len(sys.modules), "phases_ms": phases, "cpu_ms": cpu_ms, "heavy": heavy}).decode())
"""

HEAVY: tuple[str, ...] = (
    "botocore", "boto3", "google", "azure", "redis", "joserfc", "authlib", "yaml", "opentelemetry",
    "anthropic", "loop", "hypothesis", "emulators", "jwt", "cryptography",
)  # fmt: skip


@dataclass(frozen=True)
class ImportEntry:
    self_us: int
    cumulative_us: int
    depth: int
    module: str


def parse_importtime(stderr: str) -> list[ImportEntry]:
    """The ``import time: self | cumulative | name`` lines of ``python -X importtime``."""
    entries: list[ImportEntry] = []
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, cumulative_us, name = line.removeprefix("import time:").split("|", 2)
        depth = (len(name) - len(name.lstrip(" "))) // 2
        entries.append(ImportEntry(int(self_us), int(cumulative_us), depth, name.strip()))
    return entries


def _env(upstream_url: str, extra: dict[str, str]) -> dict[str, str]:
    return {"GATEWAY_API_KEYS": "bench-key", "ANTHROPIC_BASE_URL": upstream_url, **extra}


def _python_env(env: dict[str, str]) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "ANTHROPIC_API_KEY": "upstream-key", **env, "PYTHONPATH": path}


def measure_spawns(
    cmd: Sequence[str], env: dict[str, str], upstream_url: str, runs: int, timeout: float
) -> tuple[list[float], list[float]]:
    """Spawn -> first served 200 of ``runs`` gateways started one after another, and the CPU
    seconds (user + system) each had used by then (less sensitive to a busy machine)."""
    probe = LoadConfig(url=upstream_url, mode="nonstream", concurrency=1, api_key="bench-key")
    times: list[float] = []
    cpu: list[float] = []
    for _ in range(runs):
        server = spawn_gateway(cmd, env, probe, timeout)
        times.append(server.startup_s)
        cpu.append((procinfo.process_ticks(server.proc.pid) or 0) / procinfo.CLK_TCK)
        server.close()
    return times, cpu


def measure_floor(upstream_url: str, runs: int, timeout: float) -> list[float]:
    """Spawn -> first served 200 of the bare aiohttp pass-through (the floor), ``runs`` times."""
    probe = LoadConfig(url=upstream_url, mode="nonstream", concurrency=1, api_key="bench-key")
    times: list[float] = []
    for _ in range(runs):
        server = spawn_passthrough(upstream_url, probe, timeout)
        times.append(server.startup_s)
        server.close()
    return times


def probe_startup(env: dict[str, str]) -> dict[str, object]:
    """Module count, phase times and heavy modules of one ``serve``-like start-up (:data:`PROBE`)."""
    out = subprocess.run(
        [sys.executable, "-c", PROBE, ",".join(HEAVY)],
        env=_python_env(env), capture_output=True, text=True, check=True, cwd=REPO_ROOT, timeout=60,
    )  # fmt: skip
    result: dict[str, object] = orjson.loads(out.stdout)
    return result


def importtime(env: dict[str, str], module: str = "gateway.process") -> list[ImportEntry]:
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {module}, gateway.app"],
        env=_python_env(env), capture_output=True, text=True, check=True, cwd=REPO_ROOT, timeout=60,
    )  # fmt: skip
    return parse_importtime(out.stderr)


def _print_imports(entries: list[ImportEntry], top: int) -> None:
    total = sum(e.self_us for e in entries)
    print(f"imports: {len(entries)} modules, {total / 1000:.0f} ms of import time (self, summed)")
    print(f"top {top} by cumulative time (depth <= 2: the first-level packages and theirs):")
    shallow = [e for e in entries if e.depth <= 2]
    for e in sorted(shallow, key=lambda e: -e.cumulative_us)[:top]:
        print(f"  {e.cumulative_us / 1000:8.1f} ms  {'  ' * e.depth}{e.module}")
    print(f"top {top} by own time:")
    for e in sorted(entries, key=lambda e: -e.self_us)[:top]:
        print(f"  {e.self_us / 1000:8.1f} ms  {e.module}")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench startup", description=__doc__)
    p.add_argument("--runs", type=int, default=10, help="gateways spawned one after another (default 10)")
    p.add_argument("--top", type=int, default=25, help="-X importtime entries listed (default 25)")
    p.add_argument("--startup-timeout", type=float, default=30.0)
    p.add_argument("--json", action="store_true", help="print the figures as JSON instead")
    p.add_argument(
        "--floor", action="store_true", help="also time the bare aiohttp pass-through's start-up, as often"
    )
    add_gateway_args(p)
    a = p.parse_args(argv)
    processes.ensure_bytecode()
    upstream, port = processes.start_upstream()
    try:
        upstream_url = f"http://127.0.0.1:{port}"
        env = _env(upstream_url, dict(a.gateway_env))
        times, cpu = measure_spawns(a.gateway_cmd, env, upstream_url, a.runs, a.startup_timeout)
        floor = measure_floor(upstream_url, a.runs, a.startup_timeout) if a.floor else []
        probe = probe_startup(env)
        entries = importtime(env)
    except processes.BenchError as exc:
        print(f"bench startup failed: {exc}", file=sys.stderr)
        return 1
    finally:
        processes.stop(upstream)
    figures = {
        "runs": len(times),
        "startup_median_s": statistics.median(times),
        "startup_min_s": min(times),
        "startup_s": times,
        "cpu_median_s": statistics.median(cpu),
        "cpu_min_s": min(cpu),
        **probe,
        "import_ms": sum(e.self_us for e in entries) / 1000,
    }
    if floor:
        figures.update(passthrough_median_s=statistics.median(floor), passthrough_min_s=min(floor))
    if a.json:
        print(orjson.dumps(figures, option=orjson.OPT_INDENT_2).decode())
        return 0
    print(
        f"start-up (spawn -> first served 200), {len(times)} runs: median {statistics.median(times):.3f} s, "
        f"min {min(times):.3f} s, max {max(times):.3f} s; CPU used by then: median "
        f"{statistics.median(cpu):.3f} s, min {min(cpu):.3f} s"
    )
    if floor:
        print(
            f"bare aiohttp pass-through, {len(floor)} runs: median {statistics.median(floor):.3f} s, "
            f"min {min(floor):.3f} s (gateway / pass-through medians: "
            f"{statistics.median(times) / statistics.median(floor):.2f}x)"
        )
    print(
        f"serve-like start-up in one interpreter: {probe['modules']} modules, {probe['cpu_ms']} ms CPU; "
        f"phases (ms): {probe['phases_ms']}"
    )
    print(f"heavy optional dependencies loaded: {probe['heavy'] or 'none'}")
    _print_imports(entries, a.top)
    return 0
