"""Added latency of the gateway on the Bedrock path versus the first-party path (concurrency 1).

``python -m gateway.bench.provider_latency [--requests 300] [--warmup 30] [--json OUT] [--pin]``

For each provider P in (anthropic, bedrock), started up front and all idle but the path measured:

1. P's emulator (:func:`~gateway.emulator.upstreams.emulated_upstream`, fixture credentials) in a
   process of its own (:mod:`gateway.bench.provider_emulator`);
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
import math
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any, Final
from urllib.parse import urlsplit

import aiohttp
import orjson
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from gateway.bench import evloop, payloads, procinfo
from gateway.bench.loadgen import LoadConfig
from gateway.bench.processes import BenchError, free_port, log_tail, stop, wait_first_served
from gateway.bench.provider_emulator import EmulatorProcess, start_emulators
from gateway.bench.report import percentile
from gateway.config import Settings
from gateway.providers.bedrock_request import invoke_body_bytes, model_path
from gateway.providers.preparation import resolver_for
from gateway.streaming.eventstream import EventStreamToSSE

PROVIDERS: Final = ("anthropic", "bedrock")
MODES: Final = ("nonstream", "stream")
MODEL: Final = payloads.MODEL
CLIENT_KEY: Final = "bench-key"
API_VERSION: Final = "2023-06-01"
# The scripted model echoes the prompt, then writes filler until max_tokens: with this prompt and
# budget a stream carries 50 text deltas (3 words each), as in the first-party benchmark.
PROMPT: Final = (
    "[[scenario:max_tokens]] In one paragraph, explain what an HTTP keep-alive connection is and "
    "why a reverse proxy should reuse upstream connections."
)
MAX_TOKENS: Final = 246
TARGET_DELTAS: Final = 50
NOISE_PCT: Final = 10.0  # other processes above this share of a core during a run are reported
REQUEST_TIMEOUT_S: Final = 30.0

_INHERITED_OUT: Final = ("AWS_", "ANTHROPIC_", "GATEWAY_", "CLAUDE_CODE_", "GOOGLE_", "CLOUD_ML_")
_PROXY_VARS: Final = frozenset({"http_proxy", "https_proxy", "all_proxy", "no_proxy"})


# --- the request and the answer checks -----------------------------------------------------------


def request_payload(stream: bool) -> dict[str, Any]:
    """The client's Messages request (the same for every provider, path and run)."""
    body: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": MAX_TOKENS,
        "system": payloads.system_prompt(),
        "messages": [{"role": "user", "content": PROMPT}],
    }
    if stream:
        body["stream"] = True
    return body


def _unmapped(code: str, message: str) -> tuple[str, str]:
    return "api_error", f"{code}: {message}"


def sse_deltas(raw: bytes) -> int:
    """Text deltas of a complete first-party SSE stream; ``ValueError`` if it is not one."""
    if b"event: error" in raw:
        raise ValueError(f"stream carried an error event: {raw[raw.find(b'event: error') :][:200]!r}")
    if not raw.rstrip().endswith(b"}") or b"event: message_stop" not in raw[-200:]:
        raise ValueError("stream did not end with message_stop")
    return raw.count(b"event: content_block_delta")


def eventstream_deltas(raw: bytes) -> int:
    """Text deltas of a complete Bedrock event stream (decoded as the gateway decodes it)."""
    translator = EventStreamToSSE(_unmapped)
    sse = translator.feed(raw)
    if translator.failed:
        raise ValueError("corrupt event stream")
    return sse_deltas(sse)


def message_chars(raw: bytes) -> int:
    """Characters of text in a non-streaming Message; ``ValueError`` if it is not one."""
    try:
        message = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(message, dict) or message.get("type") != "message":
        raise ValueError(f"not a Message: {raw[:200]!r}")
    return sum(len(b.get("text", "")) for b in message.get("content", []) if b.get("type") == "text")


# --- endpoints ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Endpoint:
    """One way to send the request: its URL, body, fresh headers per request, and answer check."""

    url: str
    body: bytes
    headers: Callable[[], dict[str, str]]  # called before the timer starts (Bedrock: signs)
    answer: Callable[[bytes], int]  # text deltas (stream) or text characters (Message)


def _answer_check(stream: bool, eventstream: bool = False) -> Callable[[bytes], int]:
    if not stream:
        return message_chars
    return eventstream_deltas if eventstream else sse_deltas


def first_party_direct(base_url: str, api_key: str, stream: bool) -> Endpoint:
    headers = {"x-api-key": api_key, "anthropic-version": API_VERSION, "content-type": "application/json"}
    return Endpoint(
        base_url.rstrip("/") + "/v1/messages",
        orjson.dumps(request_payload(stream)),
        lambda: dict(headers),
        _answer_check(stream),
    )


def bedrock_model_id(gateway_env: Mapping[str, str]) -> str:
    """The Bedrock model id the gateway, configured by ``gateway_env``, sends for :data:`MODEL`."""
    return resolver_for(Settings.from_environ(gateway_env)).resolve(MODEL)


def bedrock_direct(
    base_url: str, model_id: str, region: str, access_key: str, secret_key: str, stream: bool
) -> Endpoint:
    """InvokeModel[WithResponseStream] as the gateway sends it, SigV4-signed per request."""
    url = base_url.rstrip("/") + model_path(model_id, "invoke-with-response-stream" if stream else "invoke")
    payload = request_payload(stream)
    body = invoke_body_bytes(payload, [])
    credentials = Credentials(access_key, secret_key)
    fixed = {
        "Host": urlsplit(url).netloc,
        "Accept": "application/json",
        "Content-Type": "application/json",
        "Content-Length": str(len(body)),
    }

    def signed() -> dict[str, str]:
        request = AWSRequest(method="POST", url=url, data=body, headers=dict(fixed))
        SigV4Auth(credentials, "bedrock", region).add_auth(request)
        return dict(request.headers.items())

    return Endpoint(url, body, signed, _answer_check(stream, eventstream=True))


def through_gateway(gateway_url: str, stream: bool) -> Endpoint:
    headers = {"x-api-key": CLIENT_KEY, "anthropic-version": API_VERSION, "content-type": "application/json"}
    return Endpoint(
        gateway_url.rstrip("/") + "/v1/messages",
        orjson.dumps(request_payload(stream)),
        lambda: dict(headers),
        _answer_check(stream),
    )


def direct_endpoint(emulator: EmulatorProcess, gateway_env: Mapping[str, str], stream: bool) -> Endpoint:
    if emulator.provider == "anthropic":
        return first_party_direct(emulator.base_url, emulator.env["ANTHROPIC_API_KEY"], stream)
    if emulator.provider == "bedrock":
        pe = emulator.process_env
        return bedrock_direct(
            emulator.base_url,
            bedrock_model_id(gateway_env),
            pe["AWS_REGION"],
            pe["AWS_ACCESS_KEY_ID"],
            pe["AWS_SECRET_ACCESS_KEY"],
            stream,
        )
    raise ValueError(f"no direct path for provider {emulator.provider!r}")


# --- sequential timed requests --------------------------------------------------------------------


@dataclass
class Samples:
    latency: list[float] = field(default_factory=list)  # seconds
    sizes: list[int] = field(default_factory=list)  # response body bytes
    answers: Counter[int] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    first_error: str = ""

    cpu_ms: dict[str, float] = field(default_factory=dict)  # role -> CPU ms while this path ran
    other_pct_s: float = 0.0  # processes outside the benchmark: % of a core x seconds
    wall_s: float = 0.0

    def fail(self, kind: str, detail: str) -> None:
        self.errors[kind] += 1
        if not self.first_error:
            self.first_error = f"{kind}: {detail}"

    def add(self, block: Samples, cpu: procinfo.CpuShares, wall_s: float) -> None:
        """Merge a block of this path's requests, with the CPU used while it ran."""
        self.latency += block.latency
        self.sizes += block.sizes
        self.answers.update(block.answers)
        self.errors.update(block.errors)
        self.first_error = self.first_error or block.first_error
        for role, pct in cpu.per_role.items():
            self.cpu_ms[role] = self.cpu_ms.get(role, 0.0) + pct / 100.0 * wall_s * 1e3
        self.other_pct_s += cpu.other_processes * wall_s
        self.wall_s += wall_s


async def timed_requests(session: aiohttp.ClientSession, endpoint: Endpoint, n: int) -> Samples:
    """``n`` requests one after the other; each timed from the POST to its last body byte."""
    samples = Samples()
    perf = time.perf_counter
    for _ in range(n):
        headers = endpoint.headers()
        try:
            started = perf()
            async with session.post(endpoint.url, data=endpoint.body, headers=headers) as response:
                raw = await response.read()
                elapsed = perf() - started
                status = response.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            samples.fail(type(exc).__name__, repr(exc))
            continue
        if status != 200:
            samples.fail(f"HTTP {status}", raw[:300].decode("utf-8", "replace"))
            continue
        try:
            units = endpoint.answer(raw)
        except ValueError as exc:
            samples.fail("bad body", str(exc))
            continue
        samples.latency.append(elapsed)
        samples.sizes.append(len(raw))
        samples.answers[units] += 1
    return samples


# --- results --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PathStats:
    """N sequential requests on one path (direct or through the gateway)."""

    requests: int
    ok: int
    errors: dict[str, int]
    p50_ms: float
    p99_ms: float
    mean_ms: float
    answer: int  # text deltas per stream / text characters per Message (the most common value)
    answers: dict[int, int]
    response_bytes: int  # median body size
    cpu_ms_per_request: dict[str, float]  # role -> CPU ms per request during the run
    other_processes_pct: float  # processes outside the benchmark, % of one core

    @classmethod
    def of(cls, samples: Samples, requests: int) -> PathStats:
        lat = samples.latency
        ok = len(lat)
        return cls(
            requests=requests,
            ok=ok,
            errors=dict(samples.errors),
            p50_ms=percentile(lat, 50) * 1e3,
            p99_ms=percentile(lat, 99) * 1e3,
            mean_ms=(sum(lat) / ok * 1e3) if ok else math.nan,
            answer=samples.answers.most_common(1)[0][0] if samples.answers else -1,
            answers=dict(samples.answers),
            response_bytes=int(percentile(samples.sizes, 50)) if samples.sizes else 0,
            cpu_ms_per_request={role: ms / max(1, requests) for role, ms in samples.cpu_ms.items()},
            other_processes_pct=samples.other_pct_s / samples.wall_s if samples.wall_s > 0 else 0.0,
        )


@dataclass(frozen=True)
class Row:
    provider: str
    mode: str
    direct: PathStats
    gateway: PathStats

    @property
    def added_p50_ms(self) -> float:
        return self.gateway.p50_ms - self.direct.p50_ms

    @property
    def p50_ratio(self) -> float:
        return self.gateway.p50_ms / self.direct.p50_ms if self.direct.p50_ms > 0 else math.nan


@dataclass(frozen=True)
class ProviderGap:
    """Bedrock versus first party for one mode: the added p50 of each, their ratio and difference."""

    mode: str
    added_bedrock_ms: float
    added_first_party_ms: float
    gateway_cpu_bedrock_ms: float = math.nan  # gateway CPU per request (less sensitive to noise)
    gateway_cpu_first_party_ms: float = math.nan

    @property
    def ratio(self) -> float:
        if self.added_first_party_ms <= 0 or math.isnan(self.added_first_party_ms):
            return math.nan
        return self.added_bedrock_ms / self.added_first_party_ms

    @property
    def difference_ms(self) -> float:
        return self.added_bedrock_ms - self.added_first_party_ms

    @property
    def cpu_ratio(self) -> float:
        if not self.gateway_cpu_first_party_ms > 0:
            return math.nan
        return self.gateway_cpu_bedrock_ms / self.gateway_cpu_first_party_ms


def provider_gaps(rows: Sequence[Row]) -> list[ProviderGap]:
    by_key = {(r.provider, r.mode): r for r in rows}
    gaps = []
    for mode in MODES:
        bedrock, first_party = by_key.get(("bedrock", mode)), by_key.get(("anthropic", mode))
        if bedrock is not None and first_party is not None:
            gaps.append(
                ProviderGap(
                    mode,
                    bedrock.added_p50_ms,
                    first_party.added_p50_ms,
                    bedrock.gateway.cpu_ms_per_request.get("gateway", math.nan),
                    first_party.gateway.cpu_ms_per_request.get("gateway", math.nan),
                )
            )
    return gaps


@dataclass
class Report:
    environment: dict[str, Any]
    rows: list[Row]

    @property
    def gaps(self) -> list[ProviderGap]:
        return provider_gaps(self.rows)

    @property
    def errors(self) -> int:
        return sum(sum(p.errors.values()) for r in self.rows for p in (r.direct, r.gateway))

    def notes(self) -> list[str]:
        notes = []
        for r in self.rows:
            answers = {r.direct.answer, r.gateway.answer}
            if len(answers) > 1 or len(r.direct.answers) > 1 or len(r.gateway.answers) > 1:
                notes.append(
                    f"{r.provider} {r.mode}: answers differ between requests or paths "
                    f"(direct {r.direct.answers}, gateway {r.gateway.answers})"
                )
            if r.mode == "stream" and r.direct.answer != TARGET_DELTAS:
                notes.append(f"{r.provider} stream: {r.direct.answer} text deltas, not {TARGET_DELTAS}")
            for name, p in (("direct", r.direct), ("gateway", r.gateway)):
                if p.errors:
                    notes.append(f"{r.provider} {r.mode} {name}: {p.requests - p.ok} failed {p.errors}")
                if p.other_processes_pct >= NOISE_PCT:
                    notes.append(
                        f"{r.provider} {r.mode} {name}: processes outside the benchmark used "
                        f"{p.other_processes_pct:.0f}% of a core"
                    )
        return notes

    def as_dict(self) -> dict[str, Any]:
        return {
            "environment": self.environment,
            "rows": [
                {
                    "provider": r.provider,
                    "mode": r.mode,
                    "direct": asdict(r.direct),
                    "gateway": asdict(r.gateway),
                    "added_p50_ms": r.added_p50_ms,
                    "p50_ratio": r.p50_ratio,
                }
                for r in self.rows
            ],
            "bedrock_vs_first_party": [
                {**asdict(g), "ratio": g.ratio, "difference_ms": g.difference_ms, "cpu_ratio": g.cpu_ratio}
                for g in self.gaps
            ],
            "errors": self.errors,
            "notes": self.notes(),
        }

    def render(self) -> str:
        env = self.environment
        stream_answers = sorted({r.direct.answer for r in self.rows if r.mode == "stream"})
        message_answers = sorted({r.direct.answer for r in self.rows if r.mode == "nonstream"})
        answers = [f"{'/'.join(map(str, stream_answers))} text deltas per stream"] if stream_answers else []
        if message_answers:
            answers.append(f"{'/'.join(map(str, message_answers))}-char text per Message")
        pinning = (
            "gateways pinned to CPU {gateway}, client + emulators to CPU {others}".format(
                **env["pinned_cpus"]
            )
            if env["pinned_cpus"]
            else "no pinning"
        )
        lines = [
            "switchyard provider latency: what the gateway adds, Bedrock path vs first-party path",
            f"  concurrency 1: {env['requests']} sequential requests per path after {env['warmup']} "
            f"warm-up, the paths taking turns in blocks of {env['block']}",
            f"  request: {MODEL}, {env['request_bytes']} B",
            f"  answer: {', '.join(answers)} (scripted, the same on every path)",
            f"  CPU: {env['usable_cpus']} usable core(s); client, emulator and gateway in separate "
            f"processes ({env['event_loop']}),",
            f"    the other provider's pair idle; {pinning}",
            "",
            f"{'':20} | {'direct (emulator)':^22} | {'gateway -> emulator':^22} |",
            f"{'provider':<10} {'mode':<9} | {'p50':>7} {'p99':>7} {'resp':>6} | {'p50':>7} {'p99':>7} "
            f"{'resp':>6} | {'+p50':>7} {'p50 x':>6} {'gw CPU':>7}",
        ]
        lines.append("-" * len(lines[-1]))
        for r in self.rows:
            d, g = r.direct, r.gateway
            lines.append(
                f"{r.provider:<10} {r.mode:<9} | {_f(d.p50_ms)} {_f(d.p99_ms)} {_kb(d.response_bytes)} | "
                f"{_f(g.p50_ms)} {_f(g.p99_ms)} {_kb(g.response_bytes)} | {_f(r.added_p50_ms)} "
                f"{_f(r.p50_ratio, 6)} {_f(g.cpu_ms_per_request.get('gateway', math.nan))}"
            )
        lines += [
            "ms; latency = POST to last body byte (aiohttp client); resp = median response body (KB);",
            "+p50 = gateway p50 - direct p50; p50 x = gateway p50 / direct p50;",
            "gw CPU = gateway process CPU ms per request during the through-gateway run",
        ]
        if self.gaps:
            lines += ["", "Bedrock vs first party, added p50 (gateway - direct) and gateway CPU per request:"]
            for gap in self.gaps:
                lines.append(
                    f"  {gap.mode:<9}  bedrock {gap.added_bedrock_ms:+.3f} ms, first-party "
                    f"{gap.added_first_party_ms:+.3f} ms: ratio {_n(gap.ratio)}, difference "
                    f"{gap.difference_ms:+.3f} ms; CPU {_n(gap.gateway_cpu_bedrock_ms)} vs "
                    f"{_n(gap.gateway_cpu_first_party_ms)} ms: ratio {_n(gap.cpu_ratio)}"
                )
        notes = self.notes()
        if notes:
            lines += ["", "NOTES:", *(f"  {n}" for n in notes)]
        return "\n".join(lines)


def _f(v: float, width: int = 7) -> str:
    return f"{'-':>{width}}" if math.isnan(v) else f"{v:>{width}.3f}"


def _n(v: float) -> str:
    return "-" if math.isnan(v) else f"{v:.3f}"


def _kb(n: int) -> str:
    return f"{n / 1024:>6.1f}"


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
    env = {k: v for k, v in base.items() if not k.startswith(_INHERITED_OUT) and k.lower() not in _PROXY_VARS}
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
        prog="python -m gateway.bench.provider_latency",
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
