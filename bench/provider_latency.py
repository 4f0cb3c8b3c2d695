"""Added latency of the gateway on the Bedrock path versus the first-party path (concurrency 1).

``python -m bench.provider_latency [--requests 300] [--warmup 30] [--json OUT] [--pin]``

For each provider P in (anthropic, bedrock), started up front and all idle but the path measured:

1. P's emulator (:func:`~emulators.upstreams.emulated_upstream`, fixture credentials) in a
   process of its own (:mod:`bench.provider_emulator`);
2. a gateway (``python -m gateway serve``) configured for P: the emulator's ``env`` and
   ``process_env`` (for Bedrock: the fixture AWS keys, empty AWS config/credentials files,
   ``AWS_EC2_METADATA_DISABLED``) plus ``GATEWAY_API_KEYS``; inherited ``AWS_*``,
   ``ANTHROPIC_*``, ``GATEWAY_*`` and proxy variables are removed so only the fixture applies.

Then for each mode (non-streaming, streaming) every path (P direct to its emulator, P through its
gateway) is warmed up and gets N sequential requests (concurrency 1), one keep-alive connection
per path, each request timed from just before the POST to its last body byte. The paths take
turns in rounds of ``--block`` requests (the order rotating every round), so drift and outside
load hit every path alike; ``--block N`` measures one path after the other instead.

Direct requests are what the gateway itself sends upstream: first party, ``POST /v1/messages``
with ``x-api-key``; Bedrock, ``POST /model/{id}/invoke[-with-response-stream]`` with the gateway's
model id and InvokeModel body (:mod:`gateway.providers.bedrock_request`), SigV4-signed with
botocore and the emulator's fixture credentials. Signing happens before the timer starts: the
gateway's own signing is part of what it adds, the client's is not what is measured here.

Every run uses the same request (2 KB system prompt, one user turn whose marker makes the
emulator's scripted model write until ``max_tokens``) and so the same scripted answer: 50 text
deltas per stream, or the same text in one Message. Every response is decoded (after its timer
stopped) and checked; the answer sizes are reported so both providers can be seen to match.

Reported per provider and mode: p50/p99 direct and through the gateway, the added p50 (through -
direct) and the gateway's CPU time per request; then, per mode, the ratio added_bedrock /
added_first_party and their difference. Ratios and differences only: nothing here judges an
absolute time.

CPU: the benchmark client (this process), the emulators and the gateways are separate processes,
each on uvloop; while a path is measured only the client and that provider's emulator (and
gateway) work, and at concurrency 1 at most two of them at once (in a stream, the emulator writing
while the gateway relays). ``--pin`` puts the gateways on the first usable CPU and the client and
emulators on the others; by default the scheduler places them.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import aiohttp
import orjson

from bench import evloop, procinfo
from bench.latency_paths import (
    CLIENT_KEY,
    INHERITED_OUT,
    MAX_TOKENS,
    MODEL,
    MODES,
    PROVIDERS,
    PROXY_VARS,
    REQUEST_TIMEOUT_S,
    Endpoint,
    Samples,
    direct_endpoint,
    request_payload,
    through_gateway,
    timed_requests,
)
from bench.latency_report import (
    PathStats,
    Report,
    Row,
)
from bench.loadgen import LoadConfig
from bench.processes import BenchError, free_port, log_tail, stop, wait_first_served
from bench.provider_emulator import EmulatorProcess, start_emulators

# --- the procedure --------------------------------------------------------------------------------


@dataclass
class Options:
    requests: int = 300
    warmup: int = 30
    block: int = 10  # requests per path per round (interleaving); >= requests: one path at a time
    providers: list[str] = field(default_factory=lambda: list(PROVIDERS))
    modes: list[str] = field(default_factory=lambda: list(MODES))
    pin: bool = False
    gateway_cmd: list[str] = field(default_factory=lambda: [sys.executable, "-m", "gateway", "serve"])
    startup_timeout: float = 30.0
    json_out: str | None = None
    keep_gateway_log: bool = False


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def gateway_env(base: Mapping[str, str], emulator: EmulatorProcess, port: int) -> dict[str, str]:
    """The gateway's whole environment: ``base`` without settings that could reach a real
    upstream (AWS, Anthropic, gateway, proxy variables), plus the emulator's settings."""
    env = {k: v for k, v in base.items() if not k.startswith(INHERITED_OUT) and k.lower() not in PROXY_VARS}
    env.update(emulator.env)
    env.update(emulator.process_env)
    env.update(GATEWAY_HOST="127.0.0.1", GATEWAY_PORT=str(port), GATEWAY_API_KEYS=CLIENT_KEY)
    return env


@dataclass
class GatewayProcess:
    provider: str
    proc: subprocess.Popen[bytes]
    url: str
    env: dict[str, str]
    log: IO[bytes]
    log_path: Path
    spawned_at: float  # perf_counter()


def _pinner(cpus: set[int] | None) -> Callable[[], None] | None:
    if not cpus:
        return None
    frozen = set(cpus)
    return lambda: os.sched_setaffinity(0, frozen)


def spawn_gateway(opts: Options, emulator: EmulatorProcess, cpus: set[int] | None) -> GatewayProcess:
    """Start a gateway configured for ``emulator`` (see :func:`await_gateway`)."""
    port = free_port()
    env = gateway_env(os.environ, emulator, port)
    log = tempfile.NamedTemporaryFile(  # noqa: SIM115 - closed by started(), kept on failure
        prefix=f"switchyard-provider-latency-{emulator.provider}-", suffix=".log", delete=False
    )
    spawned_at = time.perf_counter()
    proc = subprocess.Popen(
        opts.gateway_cmd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        preexec_fn=_pinner(cpus),
    )
    url = f"http://127.0.0.1:{port}"
    return GatewayProcess(emulator.provider, proc, url, env, log, Path(log.name), spawned_at)


def await_gateway(opts: Options, gateway: GatewayProcess) -> None:
    """Wait for the gateway's first 200 to ``POST /v1/messages`` (so its upstream works too)."""
    cfg = LoadConfig(url=gateway.url, api_key=CLIENT_KEY)
    try:
        wait_first_served(gateway.proc, cfg, gateway.spawned_at, opts.startup_timeout)
    except BenchError as exc:
        raise BenchError(f"{exc}\n--- gateway log tail ---\n{log_tail(gateway.log_path)}") from exc
    command = shlex.join(opts.gateway_cmd)
    _log(f"{gateway.provider}: gateway {command} on {gateway.url} (pid {gateway.proc.pid})")


@dataclass(frozen=True)
class Setup:
    emulator: EmulatorProcess
    gateway: GatewayProcess


def _stop_all(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    for proc in procs:  # signal every process first, so they shut down in parallel
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
    for proc in procs:
        stop(proc)


@contextlib.contextmanager
def started(
    opts: Options, workdir: Path, gw_cpus: set[int] | None, other_cpus: set[int] | None
) -> Iterator[list[Setup]]:
    """The providers' emulators (one process), then every provider's gateway (started in
    parallel); all stopped on exit. Idle, the other provider's pair costs no CPU."""
    procs: list[subprocess.Popen[bytes]] = []
    gateways: list[GatewayProcess] = []
    ok = False
    try:
        emulators = start_emulators(opts.providers, workdir, other_cpus, opts.startup_timeout)
        procs.append(emulators[0].proc)
        for emulator in emulators:
            _log(f"{emulator.provider}: emulator on {emulator.base_url} (pid {emulator.pid})")
            gateway = spawn_gateway(opts, emulator, gw_cpus)
            gateways.append(gateway)
            procs.append(gateway.proc)
        for gateway in gateways:
            await_gateway(opts, gateway)
        yield [Setup(e, g) for e, g in zip(emulators, gateways, strict=True)]
        ok = True
    finally:
        _stop_all(procs)
        for gateway in gateways:
            gateway.log.close()
            if ok and not opts.keep_gateway_log:
                gateway.log_path.unlink(missing_ok=True)
            else:
                _log(f"{gateway.provider}: gateway log kept at {gateway.log_path}")


def _session() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=1),
        timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S),
    )


@dataclass
class _Path:
    """One of the measured paths of a mode: a provider, direct or through the gateway."""

    provider: str
    name: str  # "direct" or "gateway"
    session: aiohttp.ClientSession
    endpoint: Endpoint
    roles: dict[str, list[int]]
    samples: Samples = field(default_factory=Samples)

    @property
    def label(self) -> str:
        return f"{self.provider} {self.name}"


async def _measure_mode(opts: Options, mode: str, paths: list[_Path]) -> None:
    """Warm every path up, then measure them in interleaved blocks until each has N requests.

    Interleaving (rounds of ``block`` requests per path, the order rotating every round) exposes
    every path to the same drift and outside load, which matters most for the ratio of the
    providers' added latencies; ``--block N`` measures each path in one go instead.
    """
    for path in paths:
        warm = await timed_requests(path.session, path.endpoint, opts.warmup)
        if warm.errors:
            raise BenchError(f"{path.label} {mode}: warm-up failed ({warm.first_error})")
    gc.collect()
    block = max(1, min(opts.block, opts.requests))
    done = 0
    rounds = 0
    while done < opts.requests:
        n = min(block, opts.requests - done)
        shift = rounds % len(paths)
        for path in paths[shift:] + paths[:shift]:
            before = procinfo.snapshot(time.perf_counter(), path.roles)
            part = await timed_requests(path.session, path.endpoint, n)
            after = procinfo.snapshot(time.perf_counter(), path.roles)
            path.samples.add(part, procinfo.shares(before, after), after.at - before.at)
        done += n
        rounds += 1
    for path in paths:
        if path.samples.first_error:
            failed = sum(path.samples.errors.values())
            _log(f"{path.label} {mode}: {failed} request(s) failed, first: {path.samples.first_error}")


async def _measure(opts: Options, setups: Sequence[Setup]) -> list[Row]:
    rows: list[Row] = []
    async with contextlib.AsyncExitStack() as stack:
        sessions = {}
        for setup in setups:
            for name in ("direct", "gateway"):
                sessions[setup.emulator.provider, name] = await stack.enter_async_context(_session())
        for mode in opts.modes:
            stream = mode == "stream"
            paths: list[_Path] = []
            for setup in setups:
                emulator, gateway = setup.emulator, setup.gateway
                roles = {
                    "gateway": procinfo.descendants(gateway.proc.pid),
                    "emulator": [emulator.pid],
                    "client": [os.getpid()],
                }
                provider = emulator.provider
                direct = direct_endpoint(emulator, gateway.env, stream)
                through = through_gateway(gateway.url, stream)
                paths.append(_Path(provider, "direct", sessions[provider, "direct"], direct, roles))
                paths.append(_Path(provider, "gateway", sessions[provider, "gateway"], through, roles))
            _log(
                f"run: {mode:<9} {opts.requests} requests on each of {len(paths)} paths, "
                f"in blocks of {min(opts.block, opts.requests)} (after {opts.warmup} warm-up each)"
            )
            await _measure_mode(opts, mode, paths)
            for direct_path, gateway_path in zip(paths[::2], paths[1::2], strict=True):
                rows.append(
                    Row(
                        direct_path.provider,
                        mode,
                        PathStats.of(direct_path.samples, opts.requests),
                        PathStats.of(gateway_path.samples, opts.requests),
                    )
                )
    rows.sort(key=lambda r: (opts.providers.index(r.provider), opts.modes.index(r.mode)))
    return rows


@contextlib.contextmanager
def _own_affinity(cpus: set[int] | None) -> Iterator[None]:
    if not cpus:
        yield
        return
    previous = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, previous)


def _cpu_sets(pin: bool) -> tuple[set[int] | None, set[int] | None]:
    cpus = sorted(os.sched_getaffinity(0))
    if not pin or len(cpus) < 2:
        return None, None
    return {cpus[0]}, set(cpus[1:])


def run(opts: Options) -> Report:
    """Measure every provider and mode; returns the report (also printed by :func:`main`)."""
    if opts.requests < 1 or opts.warmup < 0 or opts.block < 1:
        raise ValueError("requests >= 1, warmup >= 0 and block >= 1 are required")
    gw_cpus, other_cpus = _cpu_sets(opts.pin)
    environment: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)),
        "python": sys.version.split()[0],
        "event_loop": evloop.loop_name(),
        "requests": opts.requests,
        "warmup": opts.warmup,
        "block": min(opts.block, opts.requests),
        "concurrency": 1,
        "model": MODEL,
        "max_tokens": MAX_TOKENS,
        "request_bytes": len(orjson.dumps(request_payload(False))),
        "pinned_cpus": (
            {"gateway": ",".join(map(str, sorted(gw_cpus))), "others": ",".join(map(str, sorted(other_cpus)))}
            if gw_cpus and other_cpus
            else {}
        ),
    }
    with (
        _own_affinity(other_cpus),
        tempfile.TemporaryDirectory(prefix="switchyard-provider-latency-") as tmp,
        started(opts, Path(tmp), gw_cpus, other_cpus) as setups,
    ):
        rows = evloop.run(_measure(opts, setups))
    return Report(environment, rows)


def _csv(allowed: Sequence[str]) -> Callable[[str], list[str]]:
    def parse(raw: str) -> list[str]:
        values = [v.strip() for v in raw.split(",") if v.strip()]
        if not values or any(v not in allowed for v in values):
            raise argparse.ArgumentTypeError(f"expected a comma-separated subset of {','.join(allowed)}")
        return values

    return parse


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.provider_latency",
        description="Latency the gateway adds on the Bedrock path versus the first-party path "
        "(concurrency 1, streaming and non-streaming, each provider against its emulator).",
    )
    p.add_argument("--requests", type=int, default=300, help="measured requests per path (default 300)")
    p.add_argument("--warmup", type=int, default=30, help="warm-up requests before each (default 30)")
    p.add_argument(
        "--block",
        type=int,
        default=10,
        help="requests per path per round: paths are measured in interleaved rounds (default 10; "
        "a value >= --requests measures each path in one go)",
    )
    p.add_argument("--providers", type=_csv(PROVIDERS), default=list(PROVIDERS), help="anthropic,bedrock")
    p.add_argument("--modes", type=_csv(MODES), default=list(MODES), help="nonstream,stream")
    p.add_argument(
        "--pin", action="store_true", help="gateways on the first CPU, client + emulators on the rest"
    )
    p.add_argument(
        "--gateway-cmd",
        type=shlex.split,
        default=[sys.executable, "-m", "gateway", "serve"],
        help="command that starts the gateway (default: '<python> -m gateway serve')",
    )
    p.add_argument("--startup-timeout", type=float, default=30.0)
    p.add_argument("--json", dest="json_out", help="also write the report as JSON to this file")
    p.add_argument("--keep-gateway-log", action="store_true", help="keep the gateways' output files")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    opts = Options(
        requests=a.requests,
        warmup=a.warmup,
        block=a.block,
        providers=a.providers,
        modes=a.modes,
        pin=a.pin,
        gateway_cmd=a.gateway_cmd,
        startup_timeout=a.startup_timeout,
        json_out=a.json_out,
        keep_gateway_log=a.keep_gateway_log,
    )
    try:
        report = run(opts)
    except (BenchError, ValueError) as exc:
        print(f"provider latency bench failed: {exc}", file=sys.stderr)
        return 1
    print(report.render())
    if opts.json_out:
        Path(opts.json_out).write_bytes(
            orjson.dumps(report.as_dict(), option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS)
        )
        print(f"results written to {opts.json_out}", file=sys.stderr)
    return 1 if report.errors else 0


if __name__ == "__main__":
    sys.exit(main())
