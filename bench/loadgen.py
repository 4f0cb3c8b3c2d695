"""Closed-loop load generator: C workers, each with one keep-alive connection, for a fixed window.

Each worker sends a request, waits for the complete response, and immediately sends the next one.
A request is *counted* when it completes inside the measurement window ``[start + warmup,
start + warmup + duration]``; requests/s is the counted number divided by ``duration``.

Recorded per request: the completion time of every successful request, warm-up included (``ends``,
``time.perf_counter()`` values: on Linux that is ``CLOCK_MONOTONIC``, one clock for every process, so
the runner can count the requests completed inside the exact window it read a target's CPU time
over); for those inside the measurement window, total latency (request written -> last body byte), time to first body
byte, and for streams time to the first ``content_block_delta`` ("TTFT"), plus status and errors.
An error is a connection failure, a timeout, a non-200 status, or a stream without
``message_stop``. With ``keys_file`` (one key per line) the requests rotate round-robin through
those keys instead of sending ``api_key`` (many callers, e.g. sign-in tokens of distinct users;
every request is still serialized once up front). :func:`run_load` runs in the current process; the ``loadgen`` CLI sub-command runs
it in a worker process and prints a :class:`LoadSamples` JSON document, so the runner can spread
load generation over several processes and measure their CPU separately.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field

import orjson

from bench import payloads
from bench.client import ClientConnection, ResponseError, Target, build_request, connect

MODES = ("nonstream", "stream")


@dataclass(frozen=True)
class LoadConfig:
    url: str  # base URL; /v1/messages is appended
    mode: str = "nonstream"
    concurrency: int = 10
    duration: float = 15.0
    warmup: float = 1.0
    api_key: str = "bench-key"
    auth_header: str = "x-api-key"  # or "authorization" (sent as "Bearer <key>")
    timeout: float = 30.0
    start_at: float = 0.0  # time.time() at which to start sending (0 = now); aligns worker processes
    keys_file: str | None = None  # one key per line, rotated round-robin (instead of api_key)

    def key_list(self) -> list[str]:
        """The keys the requests carry: ``keys_file``'s lines, or ``api_key`` alone."""
        if self.keys_file is None:
            return [self.api_key]
        with open(self.keys_file, encoding="utf-8") as fh:
            keys = [line.strip() for line in fh if line.strip()]
        if not keys:
            raise ValueError(f"no key in {self.keys_file}")
        return keys

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {self.mode!r}")
        if self.concurrency < 1 or self.duration <= 0 or self.warmup < 0:
            raise ValueError("concurrency >= 1, duration > 0 and warmup >= 0 are required")

    def headers(self, key: str | None = None) -> dict[str, str]:
        """The request headers, carrying ``key`` (default: ``api_key``)."""
        key = self.api_key if key is None else key
        auth = f"Bearer {key}" if self.auth_header.lower() == "authorization" else key
        return {
            self.auth_header: auth,
            "anthropic-version": "2023-06-01",
            "accept": "application/json",
            "user-agent": "switchyard-bench/1",
        }


@dataclass
class LoadSamples:
    """Raw per-request samples from one or more load generator processes (times in seconds)."""

    mode: str
    concurrency: int
    duration: float
    latency: list[float] = field(default_factory=list)
    ttfb: list[float] = field(default_factory=list)  # first body byte
    ttft: list[float] = field(default_factory=list)  # first content_block_delta (streams only)
    ends: list[float] = field(default_factory=list)  # completion time of every success, warm-up too
    ok: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    statuses: dict[str, int] = field(default_factory=dict)
    processes: int = 1
    errors_outside: int = 0  # errors (any kind, non-200s too) outside the window: warm-up, tail

    def to_json(self) -> bytes:
        return orjson.dumps(asdict(self))

    @classmethod
    def from_json(cls, raw: bytes | str) -> LoadSamples:
        data = orjson.loads(raw)
        return cls(**data)

    @classmethod
    def merge(cls, parts: list[LoadSamples]) -> LoadSamples:
        first = parts[0]
        merged = cls(first.mode, sum(p.concurrency for p in parts), first.duration, processes=len(parts))
        errors: Counter[str] = Counter()
        statuses: Counter[str] = Counter()
        for p in parts:
            merged.latency += p.latency
            merged.ttfb += p.ttfb
            merged.ttft += p.ttft
            merged.ends += p.ends
            merged.ok += p.ok
            merged.errors_outside += p.errors_outside
            errors.update(p.errors)
            statuses.update(p.statuses)
        merged.errors = dict(errors)
        merged.statuses = dict(statuses)
        return merged

    @classmethod
    def pool(cls, rounds: list[LoadSamples]) -> LoadSamples:
        """Runs of the same load one after another (rounds): samples and durations add up, the
        concurrency stays."""
        pooled = cls.merge(rounds)
        pooled.concurrency = rounds[0].concurrency
        pooled.duration = sum(r.duration for r in rounds)
        pooled.processes = rounds[0].processes
        return pooled

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())


class _Recorder:
    def __init__(self, cfg: LoadConfig, window_start: float, window_end: float) -> None:
        self.samples = LoadSamples(cfg.mode, cfg.concurrency, cfg.duration)
        self.errors: Counter[str] = Counter()
        self.statuses: Counter[str] = Counter()
        self.window_start = window_start
        self.window_end = window_end

    def in_window(self, t: float) -> bool:
        return self.window_start <= t <= self.window_end

    def error(self, kind: str, t: float) -> None:
        if self.in_window(t):
            self.errors[kind] += 1
        else:
            self.samples.errors_outside += 1


async def _worker(
    cfg: LoadConfig,
    target: Target,
    requests: Iterator[bytes],
    rec: _Recorder,
    conns: list[ClientConnection | None],
    idx: int,
) -> None:
    stream = cfg.mode == "stream"
    s = rec.samples
    conn: ClientConnection | None = None
    while time.perf_counter() < rec.window_end:
        if conn is None or conn.closed:
            try:
                conn = await connect(target)
            except OSError as exc:
                rec.error(f"connect: {type(exc).__name__}", time.perf_counter())
                await asyncio.sleep(0.05)
                continue
            conns[idx] = conn
        t0 = time.perf_counter()
        try:
            resp = await conn.request(next(requests), stream)
        except ResponseError as exc:
            rec.error(str(exc)[:80], time.perf_counter())
            conn.close()
            conn = None
            continue
        succeeded = resp.status == 200 and (resp.complete_stream or not stream)
        if succeeded:
            s.ends.append(resp.t_end)
        if not rec.in_window(resp.t_end):
            s.errors_outside += not succeeded
            continue
        rec.statuses[str(resp.status)] += 1
        if resp.status != 200:
            rec.errors[f"status {resp.status}"] += 1
            continue
        if stream and not resp.complete_stream:
            rec.errors["stream without message_stop"] += 1
            continue
        s.ok += 1
        s.latency.append(resp.t_end - t0)
        s.ttfb.append((resp.t_first_byte or resp.t_end) - t0)
        if stream and resp.t_first_delta:
            s.ttft.append(resp.t_first_delta - t0)
    if conn is not None:
        conn.close()


async def _watchdog(cfg: LoadConfig, conns: list[ClientConnection | None], rec: _Recorder) -> None:
    while True:
        await asyncio.sleep(min(1.0, cfg.timeout / 4))
        now = time.perf_counter()
        for conn in conns:
            if conn is not None and conn.started and now - conn.started > cfg.timeout:
                conn.abort("timeout")


async def run_load(cfg: LoadConfig) -> LoadSamples:
    """Run one closed-loop load test in the running event loop and return its samples."""
    target = Target.parse(cfg.url)
    body = payloads.request_body(cfg.mode == "stream")
    # one shared rotation: successive requests (of any worker) carry successive keys
    requests = itertools.cycle([build_request(target, body, cfg.headers(key)) for key in cfg.key_list()])
    if cfg.start_at:
        await asyncio.sleep(max(0.0, cfg.start_at - time.time()))
    start = time.perf_counter()
    rec = _Recorder(cfg, start + cfg.warmup, start + cfg.warmup + cfg.duration)
    conns: list[ClientConnection | None] = [None] * cfg.concurrency
    watchdog = asyncio.create_task(_watchdog(cfg, conns, rec))
    try:
        await asyncio.gather(*(_worker(cfg, target, requests, rec, conns, i) for i in range(cfg.concurrency)))
    finally:
        watchdog.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watchdog
    rec.samples.errors = dict(rec.errors)
    rec.samples.statuses = dict(rec.statuses)
    return rec.samples
