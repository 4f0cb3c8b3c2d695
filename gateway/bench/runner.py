"""The benchmark procedure: start the fake upstream (and the gateway), measure, compare, report.

Default procedure (``make bench``):

1. start the fake upstream in its own process on a free loopback port;
2. spawn the gateway (``python -m gateway serve``) pointed at it, and time spawn -> first 200 to a
   ``POST /v1/messages`` (start-up); read its idle RSS;
3. for every mode and concurrency, run the same closed-loop load directly against the fake upstream
   and then through the gateway, recording each process's CPU share during the measurement window;
4. read the gateway's RSS after load and its peak (VmHWM); print the table and the targets.

With ``target`` set, step 2 is skipped and the already-running URL is measured instead (its
start-up and memory are read only if its pid is given).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from gateway.bench import evloop, payloads, processes, procinfo
from gateway.bench.loadgen import LoadConfig, LoadSamples
from gateway.bench.report import (
    Comparison,
    check_targets,
    format_table,
    format_targets,
    summarize,
)


@dataclass
class BenchOptions:
    target: str | None = None  # benchmark this running gateway instead of spawning ours
    target_pid: int | None = None  # optional: its pid, for RSS/CPU readings
    upstream_url: str | None = None  # use this running fake upstream instead of starting one
    upstream_port: int = 0
    duration: float = 15.0
    warmup: float = 1.0
    concurrency: list[int] = field(default_factory=lambda: [1, 10, 50])
    modes: list[str] = field(default_factory=lambda: ["nonstream", "stream"])
    gateway_cmd: list[str] = field(default_factory=lambda: [sys.executable, "-m", "gateway", "serve"])
    gateway_env: dict[str, str] = field(default_factory=dict)
    api_key: str = "bench-key"
    auth_header: str = "x-api-key"
    deltas: int = payloads.DEFAULT_DELTAS
    event_delay: float = 0.0
    loadgen_procs: int = 1
    pin: bool = False  # gateway on CPU 0, upstream + load generators on the others
    startup_timeout: float = 30.0
    json_out: str | None = None
    keep_gateway_log: bool = False  # the log is always kept when the run fails


NOISE_PCT = 10.0  # outside processes using more than this (% of a core) during a run are reported


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _cpu_sets(pin: bool) -> tuple[set[int] | None, set[int] | None]:
    cpus = sorted(os.sched_getaffinity(0))
    if not pin or len(cpus) < 2:
        return None, None
    return {cpus[0]}, set(cpus[1:])


def _load_cfg(opts: BenchOptions, url: str, mode: str, concurrency: int) -> LoadConfig:
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
    cfg: LoadConfig, procs: int, roles: dict[str, list[int]], cpus: set[int] | None
) -> tuple[LoadSamples, procinfo.CpuShares]:
    """Run ``cfg`` in ``procs`` load generator processes; return merged samples and CPU shares."""
    with tempfile.TemporaryDirectory(prefix="switchyard-bench-") as tmp:
        return _measure_load(cfg, procs, roles, cpus, Path(tmp))


def _measure_load(
    cfg: LoadConfig, procs: int, roles: dict[str, list[int]], cpus: set[int] | None, tmp: Path
) -> tuple[LoadSamples, procinfo.CpuShares]:
    lg = processes.start_loadgens(cfg, procs, tmp, cpus)
    try:
        all_roles = {**roles, "loadgen": [p.pid for p, _ in lg]}
        start_at = processes.release_loadgens([p for p, _ in lg])
        # sample CPU exactly over the measurement window (after the warm-up)
        time.sleep(max(0.0, start_at + cfg.warmup - time.time()))
        before = procinfo.snapshot(time.perf_counter(), all_roles)
        time.sleep(max(0.0, start_at + cfg.warmup + cfg.duration - time.time()))
        after = procinfo.snapshot(time.perf_counter(), all_roles)
        parts = [LoadSamples.from_json(processes.collect_output(p, out, cfg.timeout + 30)) for p, out in lg]
    finally:
        for p, _ in lg:
            processes.stop(p)
    return LoadSamples.merge(parts), procinfo.shares(before, after)


def _environment(opts: BenchOptions) -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "usable_cpus": sorted(os.sched_getaffinity(0)),
        "python": sys.version.split()[0],
        "event_loop": evloop.loop_name(),
        "loadgen_processes": opts.loadgen_procs,
        "pinned": opts.pin,
        "duration_s": opts.duration,
        "warmup_s": opts.warmup,
        "stream_deltas": opts.deltas,
        "event_delay_s": opts.event_delay,
    }


def _spawn_gateway(
    opts: BenchOptions, upstream_url: str, log: IO[bytes], log_path: Path, cpus: set[int] | None
) -> tuple[subprocess.Popen[bytes], str, float]:
    """Start our gateway against ``upstream_url``; returns it, its URL and its start-up time."""
    port = processes.free_port()
    url = f"http://127.0.0.1:{port}"
    env = {
        "GATEWAY_HOST": "127.0.0.1",
        "GATEWAY_PORT": str(port),
        "GATEWAY_API_KEYS": opts.api_key,
        "ANTHROPIC_BASE_URL": upstream_url,
        "ANTHROPIC_API_KEY": "upstream-key",
        **opts.gateway_env,
    }
    gateway, t0 = processes.start_gateway(opts.gateway_cmd, env, log, cpus)
    _log(f"gateway: {shlex.join(opts.gateway_cmd)} on {url} (pid {gateway.pid}, log {log_path})")
    try:
        startup = processes.wait_first_served(
            gateway, _load_cfg(opts, url, "nonstream", 1), t0, opts.startup_timeout
        )
    except processes.BenchError as exc:
        processes.stop(gateway)
        raise processes.BenchError(
            f"{exc}\n--- gateway log tail ---\n{processes.log_tail(log_path)}"
        ) from exc
    _log(f"gateway served its first request after {startup:.3f}s")
    return gateway, url, startup


def _compare_all(
    opts: BenchOptions,
    label: str,
    urls: dict[str, str],
    roles: dict[str, list[int]],
    gw_pid: int | None,
    cpus: set[int] | None,
) -> tuple[list[Comparison], list[str]]:
    """Every mode x concurrency, direct then through ``label``; also notes on outside CPU use."""
    comparisons: list[Comparison] = []
    noise: list[str] = []
    for mode in opts.modes:
        for conc in opts.concurrency:
            runs: dict[str, tuple[LoadSamples, procinfo.CpuShares]] = {}
            for which, url in urls.items():
                run_roles = dict(roles)
                if gw_pid is not None:
                    run_roles[label] = procinfo.descendants(gw_pid)
                _log(f"run: {mode:<9} c={conc:<3} {which:<7} {opts.duration:g}s + {opts.warmup:g}s warm-up")
                runs[which] = measure_load(
                    _load_cfg(opts, url, mode, conc), opts.loadgen_procs, run_roles, cpus
                )
                cpu = runs[which][1]
                if cpu.other_processes >= NOISE_PCT:
                    top = ", ".join(f"{name} {pct:.0f}%" for name, pct in cpu.top_others)
                    noise.append(
                        f"{mode} c={conc} {which}: processes outside the benchmark used "
                        f"{cpu.other_processes:.0f}% of a core ({top})"
                    )
            (d_samples, d_cpu), (g_samples, g_cpu) = runs["direct"], runs[label]
            comparisons.append(
                Comparison(summarize(d_samples), summarize(g_samples), d_cpu.as_dict(), g_cpu.as_dict())
            )
    return comparisons, noise


def _results_json(comparisons: list[Comparison], label: str) -> list[dict[str, Any]]:
    return [
        {
            "mode": c.direct.mode,
            "concurrency": c.direct.concurrency,
            "direct": asdict(c.direct),
            label: asdict(c.gateway),
            "added_p50_ms": c.added_p50_ms,
            "rps_ratio": c.rps_ratio,
            "p50_ratio": c.p50_ratio,
            "cpu_direct_pct": c.cpu_direct,
            f"cpu_{label}_pct": c.cpu_gateway,
        }
        for c in comparisons
    ]


def run_bench(opts: BenchOptions) -> dict[str, Any]:
    """Run the whole benchmark, print the report on stdout, and return it as a JSON-able dict."""
    gw_cpus, other_cpus = _cpu_sets(opts.pin)
    label = "target" if opts.target else "gateway"
    result: dict[str, Any] = {"environment": _environment(opts), "label": label}
    upstream: subprocess.Popen[bytes] | None = None
    gateway: subprocess.Popen[bytes] | None = None
    log_file = tempfile.NamedTemporaryFile(prefix="switchyard-bench-gateway-", suffix=".log", delete=False)  # noqa: SIM115
    log_path = Path(log_file.name)
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

        startup_s: float | None = None
        gw_pid: int | None = opts.target_pid
        if opts.target:
            target_url = opts.target.rstrip("/")
            t0 = time.perf_counter()
            processes.wait_first_served(
                None, _load_cfg(opts, target_url, "nonstream", 1), t0, opts.startup_timeout
            )
        else:
            gateway, target_url, startup_s = _spawn_gateway(opts, upstream_url, log_file, log_path, gw_cpus)
            gw_pid = gateway.pid
        idle_rss: float | None = None
        if gw_pid is not None:
            time.sleep(0.5)  # let start-up work that runs after the first request settle
            idle_rss = procinfo.rss_mb(procinfo.descendants(gw_pid))
        result.update(
            upstream_url=upstream_url, target_url=target_url, startup_s=startup_s, idle_rss_mb=idle_rss
        )

        roles = {"upstream": [upstream.pid]} if upstream is not None else {}
        urls = {"direct": upstream_url, label: target_url}
        comparisons, noise = _compare_all(opts, label, urls, roles, gw_pid, other_cpus)

        if gw_pid is not None:
            tree = procinfo.descendants(gw_pid)
            result["rss_after_load_mb"] = procinfo.rss_mb(tree)
            result["peak_rss_mb"] = procinfo.peak_rss_mb(tree)
        # the latency and throughput targets are defined for an instant upstream (no event pacing)
        checks = check_targets(comparisons if opts.event_delay <= 0 else [], startup_s, idle_rss)
        result["results"] = _results_json(comparisons, label)
        result["targets"] = [{**asdict(t), "passed": t.passed} for t in checks]
        result["noise"] = noise
        print(_render(result, comparisons, checks, label))
        ok = True
    finally:
        if gateway is not None:
            processes.stop(gateway)
        if upstream is not None:
            processes.stop(upstream)
        log_file.close()
        if (ok and not opts.keep_gateway_log) or log_path.stat().st_size == 0:
            log_path.unlink(missing_ok=True)
        else:
            _log(f"gateway log kept at {log_path}")
    return result


def _render(result: dict[str, Any], comparisons: list[Comparison], checks: list[Any], label: str) -> str:
    env = result["environment"]
    pinning = (
        "gateway pinned to CPU 0, upstream + load generators on the rest" if env["pinned"] else "no pinning"
    )
    lines = [
        f"switchyard bench: {env['cpus']} CPUs, python {env['python']} on {env['event_loop']}, "
        f"{env['loadgen_processes']} load generator process(es), {pinning},",
        f"  {env['duration_s']:g}s per run after {env['warmup_s']:g}s warm-up, "
        f"{env['stream_deltas']} deltas/stream, upstream event delay {env['event_delay_s']:g}s",
        f"{label}: {result['target_url']}   fake upstream: {result['upstream_url']}",
    ]

    def mb(key: str) -> str:
        v = result.get(key)
        return "-" if v is None else f"{v:.1f} MB"

    startup = result.get("startup_s")
    lines.append(
        f"start-up to first served POST /v1/messages: {'-' if startup is None else f'{startup:.3f} s'}   "
        f"RSS idle: {mb('idle_rss_mb')}   after load: {mb('rss_after_load_mb')}   "
        f"peak (VmHWM): {mb('peak_rss_mb')}"
    )
    lines += ["", format_table(comparisons, label)]
    if result["noise"]:
        lines += ["", "NOTE: the machine was not quiet; these runs competed with other processes:"]
        lines += [f"  {n}" for n in result["noise"]]
    lines += ["", format_targets(checks)]
    return "\n".join(lines)
