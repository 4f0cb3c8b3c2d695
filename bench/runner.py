"""The benchmark procedure: fake upstream, pass-through floor and gateway, measured side by side.

Default procedure (``make bench``):

1. start the fake upstream in its own process on a free loopback port;
2. spawn the bare aiohttp pass-through (:mod:`bench.passthrough`) and the gateway
   (``python -m gateway serve``, every default feature on: inbound key auth, the cache pipeline
   with the memory store, metrics, the access log at INFO into a file) pointed at it; time each
   spawn -> first 200 to a ``POST /v1/messages`` (start-up); read their idle RSS;
3. for every mode and concurrency, run the same closed-loop load against each target one after
   another: ``direct`` (the fake upstream), ``passthrough``, then the gateway; repeat ``rounds``
   times, every other round in reverse order, so slow drifts in the machine's load hit every
   target alike. Each run reads every process's CPU time at the start and end of its measurement
   window (after the warm-up) and counts the requests completed inside exactly that window;
4. pool the rounds (CPU seconds and completed requests summed, latency samples merged), compute
   CPU per request, the gateway / pass-through ratios and the latency added over direct; print the
   tables and issue 12's targets.

The whole run holds idle CPUs out of halt when it may (:mod:`bench.cpu_idle`; ``--no-idle-qos``
turns that off), so c=1 latencies are the targets' and not a virtual machine's wake-ups.

With ``target`` set, the gateway spawn is skipped and that running URL is measured instead (its
CPU, start-up and memory are read only if its pid is given); the pass-through still runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from bench import cpu_idle, evloop, payloads, processes, procinfo
from bench.loadgen import LoadConfig, LoadSamples
from bench.report import (
    DIRECT,
    FLOOR,
    Cell,
    RoundCpu,
    TargetRun,
    check_targets,
    completions_in_window,
)
from bench.servers import Server, spawn_gateway, spawn_passthrough
from bench.tables import format_results, format_targets


@dataclass
class BenchOptions:
    target: str | None = None  # benchmark this running gateway instead of spawning ours
    target_pid: int | None = None  # optional: its pid, for RSS/CPU readings
    upstream_url: str | None = None  # use this running fake upstream instead of starting one
    upstream_port: int = 0
    duration: float = 4.0
    warmup: float = 1.0
    rounds: int = 2
    concurrency: list[int] = field(default_factory=lambda: [1, 10, 50])
    modes: list[str] = field(default_factory=lambda: ["nonstream", "stream"])
    gateway_cmd: list[str] = field(default_factory=lambda: [sys.executable, "-m", "gateway", "serve"])
    gateway_env: dict[str, str] = field(default_factory=dict)
    api_key: str = "bench-key"
    auth_header: str = "x-api-key"
    deltas: int = payloads.DEFAULT_DELTAS
    event_delay: float = 0.0
    loadgen_procs: int = 1
    pin: bool = False  # gateway and pass-through on CPU 0, upstream + load generators on the others
    idle_qos: bool = True  # hold idle CPUs out of halt for the run (bench.cpu_idle)
    startup_timeout: float = 30.0
    json_out: str | None = None
    keep_gateway_log: bool = False  # the logs are always kept when the run fails


_T = TypeVar("_T")
NOISE_PCT = 10.0  # outside processes using more than this (% of a core) during a run are reported
NOISE_SHOWN = 3  # noisy runs listed on stdout


@dataclass(frozen=True)
class Target:
    name: str
    url: str
    pid: int | None  # its CPU is read when known (never for direct)


@dataclass
class Rounds:
    """One target's measurements in one cell, a round at a time."""

    samples: list[LoadSamples] = field(default_factory=list)
    cpu: list[RoundCpu] = field(default_factory=list)
    shares: list[dict[str, float]] = field(default_factory=list)


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _cpu_sets(pin: bool) -> tuple[set[int] | None, set[int] | None]:
    cpus = sorted(os.sched_getaffinity(0))
    if not pin or len(cpus) < 2:
        return None, None
    return {cpus[0]}, set(cpus[1:])


def load_cfg(opts: BenchOptions, url: str, mode: str, concurrency: int) -> LoadConfig:
    return LoadConfig(
        url=url,
        mode=mode,
        concurrency=concurrency,
        duration=opts.duration,
        warmup=opts.warmup,
        api_key=opts.api_key,
        auth_header=opts.auth_header,
    )


def measure_load(
    cfg: LoadConfig, procs: int, roles: dict[str, list[int]], target_role: str | None, cpus: set[int] | None
) -> tuple[LoadSamples, procinfo.CpuShares, RoundCpu]:
    """Run ``cfg`` in ``procs`` load generator processes; return the merged samples, the CPU shares
    over the measurement window, and ``target_role``'s CPU with the requests completed in it."""
    with tempfile.TemporaryDirectory(prefix="switchyard-bench-") as tmp:
        lg = processes.start_loadgens(cfg, procs, Path(tmp), cpus)
        try:
            all_roles = {**roles, "loadgen": [p.pid for p, _ in lg]}
            start_at = processes.release_loadgens([p for p, _ in lg])
            # the window starts after the warm-up; the requests counted against the CPU are the
            # ones completed between the two readings (same monotonic clock), see loadgen.py
            time.sleep(max(0.0, start_at + cfg.warmup - time.time()))
            before = procinfo.snapshot(time.perf_counter(), all_roles)
            time.sleep(max(0.0, start_at + cfg.warmup + cfg.duration - time.time()))
            after = procinfo.snapshot(time.perf_counter(), all_roles)
            parts = [
                LoadSamples.from_json(processes.collect_output(p, out, cfg.timeout + 30)) for p, out in lg
            ]
        finally:
            for p, _ in lg:
                processes.stop(p)
    samples = LoadSamples.merge(parts)
    return samples, procinfo.shares(before, after), round_cpu(before, after, samples.ends, target_role)


def round_cpu(
    before: procinfo.CpuSnapshot, after: procinfo.CpuSnapshot, ends: list[float], target_role: str | None
) -> RoundCpu:
    """``target_role``'s CPU between the two snapshots and the requests completed between them:
    one window for both, so warm-up work and warm-up requests are left out of both alike."""
    cpu_s = procinfo.role_cpu_seconds(before, after).get(target_role) if target_role else None
    return RoundCpu(after.at - before.at, cpu_s, completions_in_window(ends, before.at, after.at))


def round_order(targets: list[_T], index: int) -> list[_T]:
    """Round 0 runs the targets in the given order, round 1 in reverse, and so on."""
    return list(targets) if index % 2 == 0 else list(reversed(targets))


def _measure_cells(
    opts: BenchOptions,
    targets: list[Target],
    fixed_roles: dict[str, list[int]],
    cpus: set[int] | None,
) -> tuple[list[Cell], list[str]]:
    cells: list[Cell] = []
    noise: list[str] = []
    for mode in opts.modes:
        for conc in opts.concurrency:
            acc = {t.name: Rounds() for t in targets}
            for r in range(opts.rounds):
                for t in round_order(targets, r):
                    roles = dict(fixed_roles)
                    for other in targets:
                        if other.pid is not None:
                            roles[other.name] = procinfo.descendants(other.pid)
                    _log(
                        f"run: {mode:<9} c={conc:<3} {t.name:<11} round {r + 1}/{opts.rounds} "
                        f"{opts.duration:g}s + {opts.warmup:g}s warm-up"
                    )
                    cfg = load_cfg(opts, t.url, mode, conc)
                    target_role = t.name if t.pid is not None else None
                    samples, shares, cpu = measure_load(cfg, opts.loadgen_procs, roles, target_role, cpus)
                    acc[t.name].samples.append(samples)
                    acc[t.name].cpu.append(cpu)
                    acc[t.name].shares.append(shares.as_dict())
                    if shares.other_processes >= NOISE_PCT:
                        top = ", ".join(f"{name} {pct:.0f}%" for name, pct in shares.top_others)
                        noise.append(
                            f"{mode} c={conc} {t.name} round {r + 1}: processes outside the benchmark "
                            f"used {shares.other_processes:.0f}% of a core ({top})"
                        )
            runs = {name: TargetRun.pool(a.samples, a.cpu, a.shares) for name, a in acc.items()}
            cells.append(Cell(mode, conc, runs))
    return cells, noise


def _environment(opts: BenchOptions, idle: str) -> dict[str, Any]:
    return {
        "idle_qos": idle,
        "cpus": os.cpu_count(),
        "usable_cpus": sorted(os.sched_getaffinity(0)),
        "python": sys.version.split()[0],
        "event_loop": evloop.loop_name(),
        "loadgen_processes": opts.loadgen_procs,
        "pinned": opts.pin,
        "duration_s": opts.duration,
        "warmup_s": opts.warmup,
        "rounds": opts.rounds,
        "stream_deltas": opts.deltas,
        "event_delay_s": opts.event_delay,
    }


def cells_json(cells: list[Cell], label: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for c in cells:
        entry: dict[str, Any] = {"mode": c.mode, "concurrency": c.concurrency}
        for name, run in c.runs.items():
            entry[name] = {
                **asdict(run.summary),
                "cpu_ms_per_req": run.cpu_ms_per_req,
                "rounds": [{**asdict(r), "cpu_ms_per_req": r.cpu_ms_per_req} for r in run.rounds],
                "cpu_share_pct": run.cpu_shares,
            }
            if name != DIRECT and DIRECT in c.runs:
                entry[name]["added_p50_ms"] = c.added_p50_ms(name)
                entry[name]["added_ttft_ms"] = c.added_ttft_ms(name)
        if FLOOR in c.runs and label in c.runs:
            lo, hi = c.cpu_ratio_range(label)
            entry["ratios"] = {
                "cpu_per_req": c.cpu_ratio(label),
                "cpu_per_req_round_min": lo,
                "cpu_per_req_round_max": hi,
                "rps": c.rps_ratio(label),
            }
        out.append(entry)
    return out


def run_bench(opts: BenchOptions) -> dict[str, Any]:
    """Run the whole benchmark, print the report on stdout, and return it as a JSON-able dict."""
    with cpu_idle.idle_latency_held(opts.idle_qos) as idle:
        _log(f"idle CPUs: PM QoS latency request {idle}")
        return _run_bench(opts, idle)


def _run_bench(opts: BenchOptions, idle: str) -> dict[str, Any]:
    target_cpus, other_cpus = _cpu_sets(opts.pin)
    label = "target" if opts.target else "gateway"
    result: dict[str, Any] = {"environment": _environment(opts, idle), "label": label}
    upstream: subprocess.Popen[bytes] | None = None
    servers: list[Server] = []
    ok = False
    try:
        if opts.upstream_url:
            upstream_url = opts.upstream_url.rstrip("/")
        else:
            upstream, port = processes.start_upstream(
                opts.upstream_port, opts.deltas, opts.event_delay, other_cpus
            )
            upstream_url = f"http://127.0.0.1:{port}"
            _log(f"fake upstream: {upstream_url} (pid {upstream.pid})")
        probe = load_cfg(opts, upstream_url, "nonstream", 1)
        passthrough = spawn_passthrough(upstream_url, probe, opts.startup_timeout, target_cpus)
        servers.append(passthrough)
        gw_pid: int | None = opts.target_pid
        startup_s: float | None = None
        if opts.target:
            target_url = opts.target.rstrip("/")
            t0 = time.perf_counter()
            processes.wait_first_served(
                None, load_cfg(opts, target_url, "nonstream", 1), t0, opts.startup_timeout
            )
        else:
            env = {"GATEWAY_API_KEYS": opts.api_key, "ANTHROPIC_BASE_URL": upstream_url, **opts.gateway_env}
            processes.ensure_bytecode()  # start-up is timed as installed: with bytecode
            gateway = spawn_gateway(opts.gateway_cmd, env, probe, opts.startup_timeout, target_cpus)
            servers.append(gateway)
            target_url, gw_pid, startup_s = gateway.url, gateway.proc.pid, gateway.startup_s
        time.sleep(0.5)  # let start-up work that runs after the first request settle
        idle_rss = procinfo.rss_mb(procinfo.descendants(gw_pid)) if gw_pid is not None else None
        result.update(
            upstream_url=upstream_url,
            passthrough_url=passthrough.url,
            target_url=target_url,
            startup_s=startup_s,
            passthrough_startup_s=passthrough.startup_s,
            idle_rss_mb=idle_rss,
            passthrough_idle_rss_mb=procinfo.rss_mb(procinfo.descendants(passthrough.proc.pid)),
        )

        targets = [
            Target(DIRECT, upstream_url, None),
            Target(FLOOR, passthrough.url, passthrough.proc.pid),
            Target(label, target_url, gw_pid),
        ]
        fixed_roles = {"upstream": [upstream.pid]} if upstream is not None else {}
        cells, noise = _measure_cells(opts, targets, fixed_roles, other_cpus)

        if gw_pid is not None:
            tree = procinfo.descendants(gw_pid)
            result["rss_after_load_mb"] = procinfo.rss_mb(tree)
            result["peak_rss_mb"] = procinfo.peak_rss_mb(tree)
        # the targets are defined for an instant upstream (no event pacing)
        checks = check_targets(cells if opts.event_delay <= 0 else [], label, startup_s, idle_rss)
        result["results"] = cells_json(cells, label)
        result["targets"] = [{**asdict(t), "passed": t.passed} for t in checks]
        result["noise"] = noise
        result["runs_per_round"] = len(cells) * len(targets)
        print(render(result, format_results(cells, label), format_targets(checks), label))
        ok = True
    finally:
        for server in reversed(servers):
            server.close(keep_log=not ok or (opts.keep_gateway_log and server.name == "gateway"))
        if upstream is not None:
            processes.stop(upstream)
    return result


def _mb(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f} MB"


def _s(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f} s"


def render(result: dict[str, Any], tables: str, targets: str, label: str) -> str:
    env = result["environment"]
    pinning = (
        "gateway and pass-through pinned to CPU 0, upstream + load generators on the rest"
        if env["pinned"]
        else "no pinning"
    )
    lines = [
        f"switchyard bench: {env['cpus']} CPUs, python {env['python']} on {env['event_loop']}, "
        f"{env['loadgen_processes']} load generator process(es), {pinning},",
        f"  idle CPUs: PM QoS latency request {env['idle_qos']},",
        f"  {env['rounds']} round(s) x {env['duration_s']:g}s per target and cell after {env['warmup_s']:g}s "
        f"warm-up each, {env['stream_deltas']} deltas/stream, upstream event delay {env['event_delay_s']:g}s",
        f"{label}: {result['target_url']}   pass-through: {result['passthrough_url']}   "
        f"fake upstream: {result['upstream_url']}",
        f"{label} start-up (spawn -> first served 200): {_s(result.get('startup_s'))}   "
        f"RSS idle: {_mb(result.get('idle_rss_mb'))}   after load: {_mb(result.get('rss_after_load_mb'))}   "
        f"peak (VmHWM): {_mb(result.get('peak_rss_mb'))}",
        f"pass-through start-up: {_s(result.get('passthrough_startup_s'))}   "
        f"RSS idle: {_mb(result.get('passthrough_idle_rss_mb'))}",
        "",
        tables,
    ]
    noise: list[str] = result["noise"]
    if noise:
        runs = env["rounds"] * result["runs_per_round"]
        lines += [
            "",
            f"NOTE: the machine was not quiet: in {len(noise)} of {runs} runs, processes outside the "
            f"benchmark used >= {NOISE_PCT:g}% of a core (all in the JSON output), e.g.:",
            *[f"  {n}" for n in noise[:NOISE_SHOWN]],
        ]
    lines += ["", targets]
    return "\n".join(lines)
