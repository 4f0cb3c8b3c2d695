"""``python -m bench.fleet_overhead`` (or ``python -m bench fleet-overhead``): what sign-in tokens
and the fleet policy cost per request, against static keys, in one run (issue 17: <= 1.15x).

Two gateways are spawned the way ``make bench`` spawns its own (:func:`bench.servers.spawn_gateway`,
same fake upstream, same load generator, same CPU accounting), both with the same static key:
``static`` (today's default bench gateway) and ``signin``, which also has sign-in on
(``GATEWAY_OIDC_ISSUER`` at a loopback port that never answers, ``GATEWAY_PUBLIC_URL``, a
``GATEWAY_TOKEN_SIGNING_KEYS_FILE``) and a realistic ``GATEWAY_POLICY_FILE``
(:mod:`bench.fleet_setup`). The load against ``signin`` sends ``Authorization: Bearer`` access
tokens of ``--users`` distinct users (default 50), minted with the gateway's own token code from
the same keys file, round-robin. For every mode and concurrency the two run one after the other,
``--rounds`` times (every other round in reverse order); each run's CPU per request is the
gateway's user + system CPU over the measured window over the requests completed in it. Reported
(:mod:`bench.fleet_report`): CPU ms per request of each, the per-round ratio sign-in / static, its
median and spread, PASS/MISS against 1.15x, requests/s. Any failed request fails the run, and so
does any of :mod:`bench.fleet_checks` (which show the sign-in load did go through the policy).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson

from bench import payloads, processes, procinfo
from bench.fleet_checks import METRICS_KEY, Check, check_signin, check_static
from bench.fleet_report import RATIO_LIMIT, SIGNIN, STATIC, TITLES, FleetCell, cell_json, table
from bench.fleet_setup import FleetConfig, IdpSentinel, prepare
from bench.loadgen import MODES, LoadConfig, LoadSamples
from bench.processes import BenchError
from bench.report import TargetRun
from bench.runner import Rounds, measure_load, round_order
from bench.servers import Server, spawn_gateway

API_KEY = "bench-key"


@dataclass
class FleetOptions:
    duration: float = 3.0
    warmup: float = 1.0
    rounds: int = 4
    concurrency: list[int] = field(default_factory=lambda: [10, 50])
    modes: list[str] = field(default_factory=lambda: list(MODES))
    users: int = 50
    deltas: int = payloads.DEFAULT_DELTAS
    loadgen_procs: int = 1
    startup_timeout: float = 60.0
    gateway_cmd: list[str] = field(default_factory=lambda: [sys.executable, "-m", "gateway", "serve"])


@dataclass(frozen=True)
class _Target:
    name: str
    server: Server
    load: LoadConfig  # url, auth header and key(s); mode, concurrency and times set per run


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _spawn(opts: FleetOptions, upstream_url: str, fleet: FleetConfig, port: int) -> list[_Target]:
    base = {
        "GATEWAY_API_KEYS": API_KEY,
        "GATEWAY_METRICS_API_KEYS": METRICS_KEY,
        "ANTHROPIC_BASE_URL": upstream_url,
    }
    key_load = LoadConfig(url="http://127.0.0.1:0", api_key=API_KEY)
    token_load = LoadConfig(
        url="http://127.0.0.1:0",
        api_key=fleet.tokens[0],
        auth_header="authorization",
        keys_file=str(fleet.tokens_file),
    )
    targets: list[_Target] = []
    try:
        static = spawn_gateway(opts.gateway_cmd, base, key_load, opts.startup_timeout)
        targets.append(_Target(STATIC, static, key_load))
        signin = spawn_gateway(
            opts.gateway_cmd, {**base, **fleet.env}, token_load, opts.startup_timeout, port=port
        )
        targets.append(_Target(SIGNIN, signin, token_load))
    except BaseException:
        for t in targets:
            t.server.close(keep_log=True)
        raise
    return targets


def _failures(samples: LoadSamples) -> int:
    return samples.error_count + samples.errors_outside


def _measure(opts: FleetOptions, targets: list[_Target], upstream_pid: int) -> list[FleetCell]:
    cells: list[FleetCell] = []
    for mode in opts.modes:
        for conc in opts.concurrency:
            acc = {t.name: Rounds() for t in targets}
            for r in range(opts.rounds):
                for t in round_order(targets, r):
                    roles = {"upstream": [upstream_pid]}
                    roles.update({o.name: procinfo.descendants(o.server.proc.pid) for o in targets})
                    _log(f"run: {mode:<9} c={conc:<3} {t.name:<6} round {r + 1}/{opts.rounds}")
                    cfg = LoadConfig(
                        url=t.server.url,
                        mode=mode,
                        concurrency=conc,
                        duration=opts.duration,
                        warmup=opts.warmup,
                        api_key=t.load.api_key,
                        auth_header=t.load.auth_header,
                        keys_file=t.load.keys_file,
                    )
                    samples, shares, cpu = measure_load(cfg, opts.loadgen_procs, roles, t.name, None)
                    failed = _failures(samples)
                    if failed or cpu.completed == 0:
                        raise BenchError(
                            f"{t.name} {mode} c={conc} round {r + 1}: {failed} failed request(s) "
                            f"{samples.errors or ''} (outside the window: {samples.errors_outside}), "
                            f"{cpu.completed} completed in the window"
                        )
                    acc[t.name].samples.append(samples)
                    acc[t.name].cpu.append(cpu)
                    acc[t.name].shares.append(shares.as_dict())
            runs = {name: TargetRun.pool(a.samples, a.cpu, a.shares) for name, a in acc.items()}
            cells.append(FleetCell(mode, conc, runs[STATIC], runs[SIGNIN]))
    return cells


def run(opts: FleetOptions) -> dict[str, Any]:
    """The whole scenario; prints the report and returns it as a JSON-able dict (``"ok"``: every
    check held)."""
    upstream, upstream_port = processes.start_upstream(0, opts.deltas)
    upstream_url = f"http://127.0.0.1:{upstream_port}"
    idp = IdpSentinel()
    targets: list[_Target] = []
    ok = False
    try:
        with tempfile.TemporaryDirectory(prefix="switchyard-fleet-bench-") as scratch:
            port = processes.free_port()
            fleet = prepare(Path(scratch), f"http://127.0.0.1:{port}", idp.url, opts.users)
            targets = _spawn(opts, upstream_url, fleet, port)
            cells = _measure(opts, targets, upstream.pid)
            by_name = {t.name: t.server.url for t in targets}
            checks = check_static(by_name[STATIC], API_KEY, fleet) + check_signin(by_name[SIGNIN], fleet, idp)
            policy = fleet.policy_file.read_text("utf-8")
        ok = all(c.passed for c in checks)
    finally:
        for t in targets:
            t.server.close(keep_log=not ok)
        idp.close()
        processes.stop(upstream)
    result = {
        "environment": {
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
            "duration_s": opts.duration,
            "warmup_s": opts.warmup,
            "rounds": opts.rounds,
            "users": opts.users,
            "stream_deltas": opts.deltas,
            "loadgen_processes": opts.loadgen_procs,
        },
        "ratio_limit": RATIO_LIMIT,
        "results": [cell_json(c) for c in cells],
        "checks": [asdict(c) for c in checks],
        "policy_file": policy,
        "ok": ok,
    }
    print(render(opts, cells, checks))
    return result


def render(opts: FleetOptions, cells: list[FleetCell], checks: list[Check]) -> str:
    lines = [
        f"fleet overhead: {TITLES[SIGNIN]} ({opts.users} users' bearer tokens, round-robin) vs "
        f"{TITLES[STATIC]}, same gateway command, fake upstream and load generator;",
        f"  {opts.rounds} rounds x {opts.duration:g}s per gateway and cell after {opts.warmup:g}s warm-up, "
        f"alternating; {opts.deltas} deltas/stream; CPU = the gateway process's user+system time",
        "",
        *table(cells),
        "",
        "checks:",
        *[f"  [{'ok' if c.passed else 'FAILED'}] {c.name}: {c.seen}" for c in checks],
    ]
    return "\n".join(lines)


def _csv_ints(raw: str) -> list[int]:
    values = [int(v) for v in raw.split(",") if v.strip()]
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError("concurrency values must be >= 1")
    return values


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.fleet_overhead", description=__doc__.splitlines()[0])
    p.add_argument("--duration", type=float, default=3.0, help="measured seconds per run (default 3)")
    p.add_argument("--warmup", type=float, default=1.0, help="warm-up seconds per run (default 1)")
    p.add_argument("--rounds", type=int, default=4, help="runs per gateway and cell (default 4)")
    p.add_argument("--concurrency", type=_csv_ints, default=[10, 50], help="e.g. 10,50 (default)")
    p.add_argument("--modes", default=",".join(MODES), help="nonstream,stream (default both)")
    p.add_argument("--users", type=int, default=50, help="distinct signed-in users (default 50)")
    p.add_argument("--deltas", type=int, default=payloads.DEFAULT_DELTAS, help="text deltas per stream")
    p.add_argument("--loadgen-procs", type=int, default=1, help="load generator processes (default 1)")
    p.add_argument("--json", dest="json_out", help="also write the results as JSON to this file")
    a = p.parse_args(argv)
    modes = [m for m in a.modes.split(",") if m]
    if a.rounds < 1 or a.duration <= 0 or a.users < 1 or not modes or set(modes) - set(MODES):
        p.error("--rounds >= 1, --duration > 0, --users >= 1 and --modes from nonstream,stream")
    opts = FleetOptions(
        duration=a.duration,
        warmup=a.warmup,
        rounds=a.rounds,
        concurrency=a.concurrency,
        modes=modes,
        users=a.users,
        deltas=a.deltas,
        loadgen_procs=a.loadgen_procs,
    )
    try:
        result = run(opts)
    except BenchError as exc:
        print(f"fleet overhead bench failed: {exc}", file=sys.stderr)
        return 1
    if a.json_out:
        Path(a.json_out).write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
        print(f"results written to {a.json_out}", file=sys.stderr)
    if not result["ok"]:
        print("fleet overhead bench failed: a check did not hold (see above)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
