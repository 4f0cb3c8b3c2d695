"""Soak of the gateway: many long-held streams, then a long run of mixed traffic (``make soak``).

``python -m bench.soak [--streams 1000] [--hold-s 60] [--mixed-minutes 30] [--rate 50]
[--json FILE]``

The real thing on loopback: the first-party emulator as its own process (``python -m emulators
--chunk-delay``, which paces every streamed content delta) and the gateway (``switchyard serve``)
in front of it, this process as the client (aiohttp, uvloop when installed). The open-file limit
is raised first (children inherit it) and the gateway is given pool and connection caps that admit
every stream.

1. Warm-up (every request kind a few times), then the gateway's idle RSS.
2. Phase 1 (:mod:`.soak_streams`): ``--streams`` concurrent streams through the gateway plus
   ``--control-streams`` straight to the emulator, each ``--hold-s`` long.
3. Phase 2 (:mod:`.soak_mixed`): ``--mixed-minutes`` of mixed traffic at ``--rate`` requests/s,
   the gateway's RSS sampled every ``--sample-s``. It runs on a fresh gateway process (warmed up
   and read idle again; ``--same-gateway``: on phase 1's): the streams' process keeps the memory
   they freed and reuses it, which would hide growth up to that size from its RSS.

Every figure is printed (and written with ``--json``) whatever happens; the exit status is 1 when a
target is missed (:func:`.soak_report.checks`), 2 when the soak could not run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import resource
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import aiohttp
import orjson

from bench import evloop, soak_report
from bench.processes import BenchError
from bench.servers import add_gateway_args
from bench.soak_mixed import MixedConfig, kinds, mixed_traffic
from bench.soak_procs import (
    UPSTREAM_KEY,
    Child,
    cpu_percent,
    cpu_seconds,
    merge_scans,
    progress,
    raise_open_files,
    scan_log,
    start,
    start_gateway,
)
from bench.soak_requests import exchange, headers, max_tokens_for
from bench.soak_streams import HoldConfig, hold_streams

WARMUP_PER_KIND = 3
SETTLE_S = 1.0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--streams", type=int, default=1000, help="phase 1: concurrent streams through the gateway (0: skip)"
    )
    p.add_argument(
        "--control-streams",
        type=int,
        default=50,
        help="phase 1: streams straight to the emulator alongside (at most --streams)",
    )
    p.add_argument("--hold-s", type=float, default=60.0, help="phase 1: how long each stream lasts, seconds")
    p.add_argument(
        "--ramp-s",
        type=float,
        default=None,
        help="phase 1: open the streams over this long (default min(10, hold/4))",
    )
    p.add_argument(
        "--event-interval",
        type=float,
        default=0.5,
        help="the emulator's delay before each content delta, seconds",
    )
    p.add_argument(
        "--mixed-minutes", type=float, default=30.0, help="phase 2: minutes of mixed traffic (0: skip)"
    )
    p.add_argument(
        "--rate", type=float, default=50.0, help="phase 2: requests per second, every kind together"
    )
    p.add_argument("--sessions", type=int, default=200, help="phase 2: session ids in the pool")
    p.add_argument("--long-deltas", type=int, default=20, help="phase 2: content deltas of a long stream")
    p.add_argument("--sample-s", type=float, default=5.0, help="phase 2: seconds between RSS samples")
    p.add_argument(
        "--slope-window-min",
        type=float,
        default=20.0,
        help="phase 2: RSS slope over the last N minutes (at most 2/3 of the run)",
    )
    p.add_argument(
        "--slope-limit-pct",
        type=float,
        default=5.0,
        help="target: |RSS slope| per 10 min, %% of the mean RSS",
    )
    p.add_argument(
        "--slope-judge-min",
        type=float,
        default=5.0,
        help="the RSS slope is judged only over a window at least this long, minutes (shorter: reported)",
    )
    p.add_argument(
        "--same-gateway",
        action="store_true",
        help="phase 2 on phase 1's gateway process (default: a fresh one, see README)",
    )
    p.add_argument("--seed", type=int, default=0, help="phase 2: seed of the request mix and session choice")
    p.add_argument(
        "--startup-timeout", type=float, default=60.0, help="seconds the emulator and gateway get to start"
    )
    p.add_argument("--json", dest="json_out", default=None, metavar="FILE", help="write every figure to FILE")
    p.add_argument("--keep-logs", action="store_true", help="keep the gateway's and emulator's logs")
    add_gateway_args(p)
    return p


def _check_args(p: argparse.ArgumentParser, a: argparse.Namespace) -> None:
    if a.streams < 0 or a.control_streams < 0:
        p.error("--streams and --control-streams must be >= 0")
    a.control_streams = min(a.control_streams, a.streams)  # at most one per gateway stream
    if a.hold_s <= 0 or a.event_interval <= 0 or a.rate <= 0 or a.sample_s <= 0:
        p.error("--hold-s, --event-interval, --rate and --sample-s must be > 0")
    if a.mixed_minutes < 0 or a.long_deltas < 1 or a.sessions < 1:
        p.error("--mixed-minutes >= 0, --long-deltas >= 1 and --sessions >= 1")
    if a.ramp_s is not None and not 0 <= a.ramp_s < a.hold_s:
        p.error("--ramp-s must be within [0, --hold-s)")


async def _warm_up(gateway: Child, mixed: MixedConfig) -> None:
    """A few requests of every kind but long streams, so lazy start-up work is done before the
    idle reading. Outcomes are not counted."""
    async with aiohttp.ClientSession() as session:
        for i in range(WARMUP_PER_KIND):
            await asyncio.gather(
                *(
                    exchange(
                        session, gateway.url + kind.path, kind.body(i),
                        headers(kind.key, session="warm-up" if kind.session else None),
                        kind=kind.name, expect=kind.expect, stream=kind.stream,
                    )
                    for kind in kinds(mixed)
                    if kind.deltas is None
                )
            )  # fmt: skip


@dataclass
class Soak:
    """One soak run: its options, its processes (every gateway started, the current one last) and
    the figures gathered so far."""

    a: argparse.Namespace
    emulator: Child
    gateways: list[Child]
    out: dict[str, Any] = field(default_factory=dict)

    @property
    def gateway(self) -> Child:
        return self.gateways[-1]

    def cpu(self) -> tuple[float, dict[str, float]]:
        return time.perf_counter(), cpu_seconds({"gateway": self.gateway, "emulator": self.emulator})

    def cpu_since(self, mark: tuple[float, dict[str, float]]) -> dict[str, Any]:
        """``cpu_pct`` (% of one core per role) and ``cpu_wall_s`` since ``mark``."""
        now, seconds = self.cpu()
        return {"cpu_pct": cpu_percent(mark[1], seconds, now - mark[0]), "cpu_wall_s": now - mark[0]}

    async def idle_rss(self, mixed: MixedConfig) -> float:
        await _warm_up(self.gateway, mixed)
        await asyncio.sleep(SETTLE_S)
        rss = self.gateway.rss_mb()
        progress(f"soak: gateway idle RSS {rss:.1f} MB after warm-up")
        return rss

    async def fresh_gateway(self) -> None:
        """Replace the gateway by a new one (same settings): phase 2 then starts from a process
        without phase 1's freed-but-kept memory, which would hide growth up to its size."""
        a = self.a
        self.gateway.stop()
        self.gateways.append(
            await asyncio.to_thread(
                start_gateway, self.emulator, a.gateway_cmd, dict(a.gateway_env),
                a.streams + a.control_streams, a.startup_timeout,
            )
        )  # fmt: skip


async def _run(soak: Soak) -> None:
    a, out = soak.a, soak.out
    hold_deltas = max(1, round(a.hold_s / a.event_interval))
    progress("soak: sizing the scripted answers, warming up")
    hold_tokens = 0
    async with aiohttp.ClientSession() as session:
        if a.streams:
            hold_tokens, hold_deltas = await max_tokens_for(
                session, soak.emulator.url, UPSTREAM_KEY, hold_deltas
            )
        long_tokens, long_deltas = await max_tokens_for(
            session, soak.emulator.url, UPSTREAM_KEY, a.long_deltas
        )
    seconds = a.mixed_minutes * 60
    mixed = MixedConfig(
        seconds, a.rate, a.sessions, long_tokens, long_deltas, a.event_interval, a.sample_s, a.seed
    )
    idle = await soak.idle_rss(mixed)
    if a.streams:
        ramp = a.ramp_s if a.ramp_s is not None else min(10.0, a.hold_s / 4)
        hold = HoldConfig(a.streams, a.control_streams, ramp, a.event_interval, hold_tokens, hold_deltas)
        progress(f"soak: phase 1, {a.streams} streams of {hold_deltas} deltas x {a.event_interval:g}s")
        mark = soak.cpu()
        result = await hold_streams(hold, soak.gateway, soak.emulator)
        cpu = soak.cpu_since(mark)
        await asyncio.sleep(SETTLE_S)
        out["phase1"] = soak_report.hold_figures(result, asdict(hold), idle, soak.gateway.rss_mb())
        out["phase1"].update(cpu)
        if seconds and not a.same_gateway:
            await soak.fresh_gateway()
            idle = await soak.idle_rss(mixed)
    if seconds:
        progress(f"soak: phase 2, {a.mixed_minutes:g} min of mixed traffic at {a.rate:g} req/s")
        mark = soak.cpu()
        result2 = await mixed_traffic(mixed, soak.gateway, soak.emulator)
        cpu = soak.cpu_since(mark)
        window = min(a.slope_window_min * 60, seconds * 2 / 3)
        cfg = {**asdict(mixed), "mixed_minutes": a.mixed_minutes, "slope_window_s": window}
        out["phase2"] = soak_report.mixed_figures(result2, cfg, window)
        out["phase2"].update(cpu, rss_idle_mb=idle, fresh_gateway=len(soak.gateways) > 1 or not a.streams)


def _environment(nofile: int) -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "python": platform.python_version(),
        "event_loop": evloop.loop_name(),
        "open_files_limit": nofile,
        "hard_open_files_limit": resource.getrlimit(resource.RLIMIT_NOFILE)[1],
    }


def report(out: dict[str, Any], a: argparse.Namespace) -> tuple[str, list[soak_report.Check]]:
    limits = soak_report.Limits(a.slope_limit_pct, a.slope_judge_min * 60)
    checks = soak_report.checks(out.get("phase1"), out.get("phase2"), out["gateway_log"], limits)
    if not out["gateway_alive"]:
        checks.append(soak_report.Check("gateway still running at the end", 0, 1, "", at_least=True))
    env, log = out["environment"], out["gateway_log"]
    parts = [
        [
            f"switchyard soak: {env['cpus']} CPUs (load average {env['load_average'][0]:.1f} at the start), python "
            f"{env['python']} on {env['event_loop']}, open-file limit {env['open_files_limit']}",
            f"  gateway settings: {out['gateway_settings']}",
        ]
    ]
    if "phase1" in out:
        parts.append(soak_report.hold_text(out["phase1"]))
    if "phase2" in out:
        parts.append(soak_report.mixed_text(out["phase2"]))
    parts.append(
        [
            f"Gateway log: {log['lines']} lines, {log['errors']} at ERROR/CRITICAL, {log['tracebacks']} tracebacks"
        ]
        + ([f"  first: {log['first_problem']}"] if log["first_problem"] else [])
    )
    parts.append(soak_report.checks_text(checks))
    return "\n\n".join("\n".join(p) for p in parts), checks


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    a = parser.parse_args(argv)
    _check_args(parser, a)
    out: dict[str, Any] = {}
    try:
        nofile = raise_open_files(2 * (a.streams + a.control_streams) + 1024)
        out["environment"] = _environment(nofile)
        emulator, gateway, out["gateway_settings"] = start(
            a.event_interval,
            a.gateway_cmd,
            dict(a.gateway_env),
            a.streams + a.control_streams,
            a.startup_timeout,
        )
    except BenchError as exc:
        progress(f"soak: {exc}")
        return 2
    soak = Soak(a, emulator, [gateway], out)
    failure: str | None = None
    try:
        t0 = time.perf_counter()
        evloop.run(_run(soak))
        out["wall_s"] = time.perf_counter() - t0
        out["gateway_alive"] = soak.gateway.alive()
    except BenchError as exc:
        failure = str(exc)
    finally:
        keep = a.keep_logs or failure is not None
        progress("soak: stopping the gateway and the emulator")
        scans = []
        for child in soak.gateways:
            child.stop()
            scans.append(scan_log(child.log_path))
            child.drop_log(keep)
        out["gateway_log"] = asdict(merge_scans(scans))
        emulator.stop()
        emulator.drop_log(keep)
    if failure is not None:
        progress(f"soak: {failure}")
        return 2
    progress("soak: done")
    text, checks = report(out, a)
    print(text, flush=True)
    out["checks"] = [{**asdict(c), "passed": c.passed} for c in checks]
    out["passed"] = all(c.passed for c in checks)
    if a.json_out:
        with open(a.json_out, "wb") as fh:
            fh.write(orjson.dumps(out, option=orjson.OPT_INDENT_2))
    return 0 if out["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
