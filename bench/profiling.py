"""``python -m bench profile``: a sampling profile of the gateway under load (``make profile``).

Starts the fake upstream and the gateway the way the benchmark does (every default feature on),
runs the closed-loop load generator against the gateway, and after its warm-up records the
gateway process with py-spy (``record --gil --format raw --nonblocking``: only samples of the
thread holding the GIL, without pausing the process). Prints the load the gateway sustained while
being sampled and the top self and inclusive frames, in percent of the samples. ``--raw-out``
keeps the raw collapsed stacks (e.g. for a flame graph). py-spy comes from :mod:`.pyspy`.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from bench import frames, payloads, processes, pyspy
from bench.loadgen import MODES, LoadConfig, LoadSamples
from bench.report import summarize
from bench.servers import Server, add_gateway_args, spawn_gateway

LOAD_MARGIN_S = 1.0  # the load keeps running this long after sampling should have ended


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench profile",
        description="Profile the gateway under load with py-spy and print its top frames.",
    )
    p.add_argument("--mode", choices=MODES, default="stream")
    p.add_argument("--concurrency", type=int, default=10)
    p.add_argument("--seconds", type=int, default=10, help="seconds of sampling (default 10)")
    p.add_argument("--warmup", type=float, default=1.0, help="seconds of load before sampling (default 1)")
    p.add_argument("--rate", type=int, default=200, help="samples per second (default 200)")
    p.add_argument("--top", type=int, default=25, help="frames listed per table (default 25)")
    p.add_argument(
        "--by-line", action="store_true", help="keep line numbers (one row per line, not function)"
    )
    p.add_argument("--raw-out", type=Path, help="also keep py-spy's raw collapsed stacks in this file")
    p.add_argument(
        "--py-spy", dest="py_spy", type=Path, help="use this py-spy binary instead of the cached one"
    )
    add_gateway_args(p)
    p.add_argument("--api-key", default="bench-key")
    p.add_argument("--deltas", type=int, default=payloads.DEFAULT_DELTAS, help="text deltas per stream")
    return p


def _sample(a: argparse.Namespace, exe: Path, gateway: Server, raw: Path) -> tuple[LoadSamples, str]:
    """Load the gateway and record it; returns the load's samples and py-spy's failure ('' if none)."""
    cfg = LoadConfig(
        url=gateway.url,
        mode=a.mode,
        concurrency=a.concurrency,
        duration=a.seconds + LOAD_MARGIN_S,
        warmup=a.warmup,
        api_key=a.api_key,
    )
    with tempfile.TemporaryDirectory(prefix="switchyard-profile-") as tmp:
        lg = processes.start_loadgens(cfg, 1, Path(tmp))
        try:
            start_at = processes.release_loadgens([p for p, _ in lg])
            time.sleep(max(0.0, start_at + a.warmup - time.time()))
            cmd = pyspy.record_cmd(exe, gateway.proc.pid, a.seconds, a.rate, raw)
            spy = subprocess.run(cmd, capture_output=True, timeout=a.seconds + 60, check=False)
            failure = ""
            if spy.returncode != 0 or not raw.exists():
                failure = pyspy.last_line(spy.stderr) or f"exited with status {spy.returncode}"
            samples = LoadSamples.merge(
                [LoadSamples.from_json(processes.collect_output(p, out, cfg.timeout + 30)) for p, out in lg]
            )
        finally:
            for p, _ in lg:
                processes.stop(p)
    return samples, failure


def run(a: argparse.Namespace) -> int:
    try:
        exe = pyspy.ensure(a.py_spy)
    except pyspy.PySpyUnavailable as exc:
        print(f"profile: py-spy unavailable: {exc}", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="switchyard-profile-") as tmp:
        raw: Path = a.raw_out or Path(tmp) / "profile.raw"
        raw.unlink(missing_ok=True)  # py-spy writes it; its absence then means py-spy failed
        return _run(a, exe, raw)


def _run(a: argparse.Namespace, exe: Path, raw: Path) -> int:
    upstream, port = processes.start_upstream(0, a.deltas)
    gateway: Server | None = None
    try:
        upstream_url = f"http://127.0.0.1:{port}"
        env = {"GATEWAY_API_KEYS": a.api_key, "ANTHROPIC_BASE_URL": upstream_url, **dict(a.gateway_env)}
        probe = LoadConfig(url=upstream_url, mode="nonstream", concurrency=1, api_key=a.api_key)
        gateway = spawn_gateway(a.gateway_cmd, env, probe, 30.0)
        samples, failure = _sample(a, exe, gateway, raw)
        if failure:
            print(f"profile: py-spy failed on pid {gateway.proc.pid}: {failure}", file=sys.stderr)
            return 1
        s = summarize(samples)
        print(
            f"gateway under load ({a.mode}, c={a.concurrency}): {s.rps:.0f} req/s, p50 {s.p50_ms:.2f} ms, "
            f"{s.errors} errors; py-spy {a.seconds}s at {a.rate} Hz (--gil, --nonblocking)"
        )
        with raw.open(encoding="utf-8", errors="replace") as fh:
            prof = frames.parse_raw(fh, by_line=a.by_line)
        print(frames.format_profile(prof, a.top, a.seconds * a.rate))
        if a.raw_out:
            print(f"raw stacks kept in {a.raw_out}", file=sys.stderr)
        return 0
    except processes.BenchError as exc:
        print(f"profile failed: {exc}", file=sys.stderr)
        return 1
    finally:
        if gateway is not None:
            gateway.close()
        processes.stop(upstream)


def main(argv: Sequence[str]) -> int:
    p = parser()
    a = p.parse_args(argv)
    if a.seconds < 1 or a.concurrency < 1 or a.rate < 1 or a.top < 1:
        p.error("--seconds, --concurrency, --rate and --top must be >= 1")
    return run(a)
