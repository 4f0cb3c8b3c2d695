"""Phase 2 of the soak: mixed traffic at a steady rate for a long time, the gateway's RSS sampled.

Open loop: request ``i`` starts at ``i / rate`` seconds whatever the others are doing, its kind
drawn (seeded) from :func:`kinds` by weight. Kinds: non-streaming messages with a cached system
prompt (``cache_control``) and a session header, plain non-streaming messages, short streams
(a one-sentence echo) and long streams (the ``max_tokens`` scenario, ``long_deltas`` deltas) with
session headers, ``count_tokens``, and deliberate errors (an unknown model: the upstream's 404; a
malformed JSON body: the gateway's 400; a wrong key: 401). Session ids come from a fixed pool, so
the session store reaches its steady size early and what keeps growing after that is a leak.
A request is an error unless it gets its kind's status (and a stream ends with ``message_stop``).
Every ``sample_s`` the gateway's RSS and open files are read.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from bench.payloads import system_prompt
from bench.soak_procs import CLIENT_KEY, Child
from bench.soak_requests import (
    COUNT_TOKENS,
    LONG_PROMPT,
    MESSAGES,
    MODEL,
    Exchange,
    client_timeout,
    exchange,
    headers,
    message_body,
)

CACHED_SYSTEM_BYTES = 6000  # about 1,500 tokens: above the smallest cacheable prefix
UNKNOWN_MODEL = "claude-soak-no-such-model"


@dataclass(frozen=True)
class MixedConfig:
    seconds: float
    rate: float  # requests per second, all kinds together
    sessions: int  # size of the session-id pool
    long_max_tokens: int
    long_deltas: int
    interval_s: float  # the emulator's pacing (for timeouts)
    sample_s: float
    seed: int = 0


@dataclass(frozen=True)
class Kind:
    name: str
    weight: int
    path: str
    expect: int
    stream: bool
    session: bool  # sends a session header
    body: Callable[[int], bytes]  # request number -> body
    key: str = CLIENT_KEY
    deltas: int | None = None  # exact text deltas a stream of this kind must carry


def kinds(cfg: MixedConfig) -> list[Kind]:
    system = [
        {"type": "text", "text": system_prompt(CACHED_SYSTEM_BYTES), "cache_control": {"type": "ephemeral"}}
    ]
    long_body = message_body(LONG_PROMPT, cfg.long_max_tokens, stream=True)

    def cached(i: int) -> bytes:
        return message_body(f"Request {i}: summarise the guidelines in one line.", 256, system=system)

    def plain(i: int) -> bytes:
        return message_body(f"Request {i}: what is a keep-alive connection?", 128)

    def short_stream(i: int) -> bytes:
        return message_body(f"Request {i}: say hello in five words.", 128, stream=True)

    def count(i: int) -> bytes:
        body: dict[str, Any] = {
            "model": MODEL,
            "system": system,
            "messages": [{"role": "user", "content": f"n{i}"}],
        }
        return orjson.dumps(body)

    return [
        Kind("message+cache", 28, MESSAGES, 200, False, True, cached),
        Kind("message", 10, MESSAGES, 200, False, False, plain),
        Kind("stream-short", 25, MESSAGES, 200, True, True, short_stream),
        Kind("stream-long", 8, MESSAGES, 200, True, True, lambda i: long_body, deltas=cfg.long_deltas),
        Kind("count_tokens", 15, COUNT_TOKENS, 200, False, False, count),
        Kind(
            "unknown-model",
            6,
            MESSAGES,
            404,
            False,
            False,
            lambda i: message_body("hi", 16, model=UNKNOWN_MODEL),
        ),
        Kind(
            "malformed-json",
            5,
            MESSAGES,
            400,
            False,
            False,
            lambda i: b'{"model": "' + MODEL.encode() + b'", "max',
        ),
        Kind("wrong-key", 3, MESSAGES, 401, False, False, plain, key="soak-wrong-key"),
    ]


@dataclass
class MixedResult:
    exchanges: list[Exchange] = field(default_factory=list)
    samples: list[tuple[float, float, int]] = field(default_factory=list)  # (s since start, RSS MB, files)
    emulator_rss_mb: list[float] = field(default_factory=list)
    late_starts: int = 0  # requests started more than a second after their slot (client overloaded)
    seconds: float = 0.0


async def _sampler(cfg: MixedConfig, gateway: Child, emulator: Child, t0: float, out: MixedResult) -> None:
    n = 0
    while True:
        out.samples.append((time.perf_counter() - t0, gateway.rss_mb(), gateway.open_files()))
        out.emulator_rss_mb.append(emulator.rss_mb())
        n += 1
        await asyncio.sleep(max(0.0, t0 + n * cfg.sample_s - time.perf_counter()))


async def mixed_traffic(cfg: MixedConfig, gateway: Child, emulator: Child) -> MixedResult:
    """Run phase 2; returns every request's outcome and the RSS samples."""
    rng = random.Random(cfg.seed)
    table = kinds(cfg)
    weights = [k.weight for k in table]
    pool = [str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in range(max(1, cfg.sessions))]
    long_s = cfg.long_deltas * cfg.interval_s
    timeout = client_timeout(total_s=long_s + 120, read_s=max(30.0, 10 * cfg.interval_s))
    out = MixedResult()
    total = int(cfg.seconds * cfg.rate)

    async def one(session: aiohttp.ClientSession, i: int, kind: Kind) -> None:
        sid = rng.choice(pool) if kind.session else None
        hdrs = headers(kind.key, session=sid)
        out.exchanges.append(
            await exchange(
                session,
                gateway.url + kind.path,
                kind.body(i),
                hdrs,
                kind=kind.name,
                expect=kind.expect,
                stream=kind.stream,
                expect_deltas=kind.deltas,
            )
        )

    # keep-alive shorter than any server's idle timeout: no request is sent on a closing connection
    connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=15.0)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        t0 = time.perf_counter()
        sampler = asyncio.create_task(_sampler(cfg, gateway, emulator, t0, out))
        tasks: set[asyncio.Task[None]] = set()
        try:
            for i in range(total):
                slot = t0 + i / cfg.rate
                await asyncio.sleep(max(0.0, slot - time.perf_counter()))
                if time.perf_counter() - slot > 1.0:
                    out.late_starts += 1
                task = asyncio.create_task(one(session, i, rng.choices(table, weights)[0]))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            await asyncio.sleep(max(0.0, t0 + cfg.seconds - time.perf_counter()))
            out.seconds = time.perf_counter() - t0
            if tasks:
                await asyncio.gather(*tasks)
        finally:
            sampler.cancel()
    return out
