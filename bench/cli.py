"""Command line of the benchmark harness.

``python -m bench [options]``
    Full benchmark (what ``make bench`` runs): fake upstream, bare aiohttp pass-through and gateway
    subprocesses; direct, pass-through and gateway for every mode and concurrency; tables, ratios to
    the pass-through floor and targets on stdout.
``python -m bench upstream --port N``
    Only the fake upstream, in the foreground (to point another gateway at it).
``python -m bench loadgen --url URL [...]``
    Only the load generator, against any URL; prints a summary (or raw samples with ``--json``).
``python -m bench passthrough --upstream URL --port N``
    Only the bare aiohttp pass-through (:mod:`bench.passthrough`), in the foreground.
``python -m bench profile [--mode stream|nonstream] [--concurrency 10] [--seconds 10]``
    Sampling profile of the gateway under load with py-spy (:mod:`bench.profiling`).
``python -m bench startup [--runs 10]``
    The gateway's start-up time (spawn -> first 200), module count and imports (:mod:`bench.startup`).
``python -m bench failover-cache [--sessions 100] [--turns 30]``
    Cache economics of failover over two upstreams with a primary outage (:mod:`bench.failover_cache`).
``python -m bench fleet-overhead [--rounds 4] [--duration 3] [--users 50]``
    CPU per request with sign-in tokens and the fleet policy on vs static keys (:mod:`bench.fleet_overhead`).

Benchmarking another gateway (e.g. a LiteLLM proxy) the same way::

    python -m bench upstream --port 9100 &      # the fake Anthropic API
    # configure the other gateway's Anthropic base URL as http://127.0.0.1:9100, start it on :4000
    python -m bench --target http://127.0.0.1:4000 --upstream-url http://127.0.0.1:9100 \\
        --api-key <its client key> [--auth-header authorization] [--target-pid <its pid>]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import orjson

from bench import evloop, fake_upstream, payloads
from bench.loadgen import MODES, LoadConfig, run_load
from bench.processes import BenchError
from bench.report import summarize
from bench.runner import BenchOptions, run_bench
from bench.servers import add_gateway_args


def _csv_ints(raw: str) -> list[int]:
    try:
        values = [int(v) for v in raw.split(",") if v.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {raw!r}") from exc
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError("concurrency values must be >= 1")
    return values


def _csv_modes(raw: str) -> list[str]:
    modes = [m.strip() for m in raw.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise argparse.ArgumentTypeError(f"modes must be from {','.join(MODES)}, got {raw!r}")
    return modes


def _client_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--api-key", default="bench-key", help="client key sent to the target (default bench-key)")
    p.add_argument(
        "--auth-header",
        default="x-api-key",
        help="header carrying the key: x-api-key (default) or authorization (sent as 'Bearer <key>')",
    )
    p.add_argument("--warmup", type=float, default=1.0, help="seconds of load before measuring (default 1)")


_OTHER_GATEWAYS = """\
benchmarking another Anthropic-compatible gateway (e.g. a LiteLLM proxy):
  1. python -m bench upstream --port 9100        # the fake Anthropic API, in the foreground
  2. point the other gateway's Anthropic upstream at http://127.0.0.1:9100 (for LiteLLM: a
     model_list entry for claude-sonnet-4-5 with model anthropic/claude-sonnet-4-5,
     api_base http://127.0.0.1:9100 and any api_key) and start it, say on port 4000
  3. python -m bench --target http://127.0.0.1:4000 --upstream-url http://127.0.0.1:9100 \\
         --api-key <its client key> [--auth-header authorization] [--target-pid <its pid>]
  The direct baseline and the pass-through floor then use the same fake upstream, so every column
  is comparable with ours. Start-up time is measured only for the gateway we spawn; RSS and CPU
  (so the CPU ratio to the floor) only with --target-pid.
"""


SUBCOMMANDS: dict[str, str] = {
    "upstream": "the fake upstream only, in the foreground",
    "loadgen": "the load generator only, against any URL",
    "passthrough": "the bare aiohttp pass-through only, in the foreground",
    "profile": "py-spy profile of the gateway under load",
    "startup": "the gateway's start-up time, module count and imports",
    "failover-cache": "cache economics of failover over two upstreams with a primary outage",
    "fleet-overhead": "CPU per request with sign-in tokens and the fleet policy vs static keys",
}
"""Every sub-command of ``python -m bench``, for its ``--help`` (``main`` dispatches them)."""


def _run_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench",
        description="Benchmark the gateway against a fast fake Anthropic upstream, side by side with "
        "a bare aiohttp pass-through (the floor).\n\nSub-commands (each has its own --help):\n"
        + "".join(f"  {name:<16}{what}\n" for name, what in SUBCOMMANDS.items())
        + "\nOther benches of 'make bench' are modules: python -m bench.eventstream_bench, "
        "bench.provider_latency,\nbench.cache_efficiency, bench.context_session; "
        "'make bench-rate-limits': bench.rate_limits.",
        epilog=_OTHER_GATEWAYS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--target", help="benchmark this already-running gateway URL instead of spawning ours")
    p.add_argument("--target-pid", type=int, help="pid of the --target gateway, to report its RSS and CPU")
    p.add_argument("--upstream-url", help="use this running fake upstream (python -m bench upstream)")
    p.add_argument(
        "--upstream-port", type=int, default=0, help="port for the fake upstream we start (default: free)"
    )
    p.add_argument(
        "--duration", type=float, default=4.0, help="measured seconds per run and round (default 4)"
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=2,
        help="runs per target and cell, every other round in reverse target order (default 2)",
    )
    p.add_argument("--concurrency", type=_csv_ints, default=[1, 10, 50], help="e.g. 1,10,50 (default)")
    p.add_argument("--modes", type=_csv_modes, default=list(MODES), help="nonstream,stream (default both)")
    add_gateway_args(p)
    p.add_argument(
        "--deltas", type=int, default=payloads.DEFAULT_DELTAS, help="text deltas per stream (default 50)"
    )
    p.add_argument(
        "--event-delay", type=float, default=0.0, help="fake upstream pause between SSE events (s)"
    )
    p.add_argument("--loadgen-procs", type=int, default=1, help="load generator processes (default 1)")
    p.add_argument(
        "--pin",
        action="store_true",
        help="pin the gateway and the pass-through to CPU 0 and everything else to the rest",
    )
    p.add_argument(
        "--no-idle-qos",
        dest="idle_qos",
        action="store_false",
        help="do not hold idle CPUs out of halt (/dev/cpu_dma_latency = 0) during the run",
    )
    p.add_argument("--startup-timeout", type=float, default=30.0)
    p.add_argument("--json", dest="json_out", help="also write the results as JSON to this file")
    p.add_argument("--keep-gateway-log", action="store_true", help="keep the gateway's output file")
    _client_args(p)
    return p


def _upstream_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench upstream", description="Run the fake upstream.")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=9100, help="0 picks a free port (printed as 'READY <port>')")
    p.add_argument("--deltas", type=int, default=payloads.DEFAULT_DELTAS)
    p.add_argument("--event-delay", type=float, default=0.0, help="seconds between SSE events (default 0)")
    return p


def _loadgen_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench loadgen", description="Run the load generator.")
    p.add_argument("--url", required=True, help="base URL; /v1/messages is appended")
    p.add_argument("--mode", choices=MODES, default="nonstream")
    p.add_argument("--concurrency", type=int, default=10)
    p.add_argument("--duration", type=float, default=15.0)
    p.add_argument("--timeout", type=float, default=30.0)
    p.add_argument("--json", action="store_true", help="print raw samples as JSON instead of a summary")
    p.add_argument("--samples-out", type=Path, help="write raw samples as JSON to this file")
    p.add_argument("--keys-file", help="one key per line, rotated round-robin over the requests")
    p.add_argument("--wait-start", action="store_true", help=argparse.SUPPRESS)  # runner handshake
    _client_args(p)
    return p


def _main_upstream(argv: Sequence[str]) -> int:
    a = _upstream_parser().parse_args(argv)
    evloop.run(fake_upstream.serve_forever(a.host, a.port, a.deltas, a.event_delay))
    return 0


def _main_loadgen(argv: Sequence[str]) -> int:
    a = _loadgen_parser().parse_args(argv)
    start_at = 0.0
    if a.wait_start:  # runner handshake: say READY, read the common start time from stdin
        print("READY", flush=True)
        start_at = float(sys.stdin.readline())
    cfg = LoadConfig(
        url=a.url,
        mode=a.mode,
        concurrency=a.concurrency,
        duration=a.duration,
        warmup=a.warmup,
        api_key=a.api_key,
        auth_header=a.auth_header,
        timeout=a.timeout,
        start_at=start_at,
        keys_file=a.keys_file,
    )
    samples = evloop.run(run_load(cfg))
    if a.samples_out:
        tmp = a.samples_out.with_name(a.samples_out.name + ".partial")
        tmp.write_bytes(samples.to_json())
        tmp.replace(a.samples_out)  # the runner never sees a half-written file
    if a.json:
        sys.stdout.buffer.write(samples.to_json())
        sys.stdout.flush()
    elif not a.samples_out:
        s = summarize(samples)
        print(
            f"{s.mode} c={s.concurrency}: {s.ok} ok, {s.errors} errors {s.error_kinds or ''}, "
            f"{s.rps:.0f} req/s, "
            f"p50 {s.p50_ms:.2f} ms, p99 {s.p99_ms:.2f} ms, first body byte p50 {s.ttfb_p50_ms:.2f} ms"
            + (f", first content_block_delta p50 {s.ttft_p50_ms:.2f} ms" if s.mode == "stream" else "")
        )
    return 0


def _main_run(argv: Sequence[str]) -> int:
    parser = _run_parser()
    a = parser.parse_args(argv)
    if a.rounds < 1 or a.duration <= 0:
        parser.error("--rounds must be >= 1 and --duration > 0")
    opts = BenchOptions(
        target=a.target,
        target_pid=a.target_pid,
        upstream_url=a.upstream_url,
        upstream_port=a.upstream_port,
        duration=a.duration,
        warmup=a.warmup,
        rounds=a.rounds,
        concurrency=a.concurrency,
        modes=a.modes,
        gateway_cmd=a.gateway_cmd,
        gateway_env=dict(a.gateway_env),
        api_key=a.api_key,
        auth_header=a.auth_header,
        deltas=a.deltas,
        event_delay=a.event_delay,
        loadgen_procs=a.loadgen_procs,
        pin=a.pin,
        idle_qos=a.idle_qos,
        startup_timeout=a.startup_timeout,
        json_out=a.json_out,
        keep_gateway_log=a.keep_gateway_log,
    )
    try:
        result = run_bench(opts)
    except BenchError as exc:
        print(f"bench failed: {exc}", file=sys.stderr)
        return 1
    if opts.json_out:
        Path(opts.json_out).write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
        print(f"results written to {opts.json_out}", file=sys.stderr)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "upstream":
        return _main_upstream(args[1:])
    if args and args[0] == "loadgen":
        return _main_loadgen(args[1:])
    # imported here: the load generator processes start with this module and need neither
    if args and args[0] == "passthrough":
        from bench import passthrough

        return passthrough.main(args[1:])
    if args and args[0] == "profile":
        from bench import profiling

        return profiling.main(args[1:])
    if args and args[0] == "startup":
        from bench import startup

        return startup.main(args[1:])
    if args and args[0] == "failover-cache":
        from bench import failover_cache

        return failover_cache.main(args[1:])
    if args and args[0] == "fleet-overhead":
        from bench import fleet_overhead

        return fleet_overhead.main(args[1:])
    return _main_run(args)
