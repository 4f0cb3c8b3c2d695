"""Phase 1 of the soak: many concurrent streams through the gateway, held open by the emulator's
pacing, with a small control group of streams straight to the emulator at the same time.

Streams are opened over ``ramp_s`` (gateway and control streams interleaved), each on its own
connection; every one asks for the same scripted answer (``deltas`` text deltas, each sent by the
emulator after ``interval_s``), so each lasts about ``deltas x interval_s``. While every gateway
stream is open at once (all had their first event, none has ended) the gateway's RSS and open
files are read every ``READING_S``. Per stream: status, every event, the gap between consecutive
``content_block_delta`` arrivals, and whether it ended with ``message_stop`` after exactly
``deltas`` deltas.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Final

import aiohttp

from bench.soak_procs import CLIENT_KEY, UPSTREAM_KEY, Child
from bench.soak_requests import (
    LONG_PROMPT,
    MESSAGES,
    Exchange,
    client_timeout,
    exchange,
    headers,
    message_body,
)

READING_S: Final = 0.5
MONITOR_S: Final = 0.1


@dataclass(frozen=True)
class HoldConfig:
    streams: int
    control: int  # streams straight to the emulator, alongside
    ramp_s: float
    interval_s: float
    max_tokens: int
    deltas: int

    @property
    def hold_s(self) -> float:
        return self.deltas * self.interval_s


@dataclass
class HoldResult:
    gateway: list[Exchange]
    direct: list[Exchange]
    rss_open_mb: list[float] = field(default_factory=list)  # gateway, while every stream was open
    files_open: list[int] = field(default_factory=list)
    emulator_rss_open_mb: list[float] = field(default_factory=list)
    all_open_at: float | None = None  # perf_counter() when the last gateway stream opened
    first_end_at: float | None = None  # ... when the first one ended
    most_open: int = 0  # most gateway streams open at one moment

    @property
    def all_open_s(self) -> float:
        """How long every gateway stream was open at once."""
        if self.all_open_at is None or self.first_end_at is None:
            return 0.0
        return max(0.0, self.first_end_at - self.all_open_at)


class _Open:
    def __init__(self) -> None:
        self.opened = 0
        self.ended = 0
        self.t_all_open: float | None = None
        self.t_first_end: float | None = None


def schedule(streams: int, control: int) -> list[bool]:
    """Which of the ``streams + control`` openings go straight to the emulator (True): spread
    evenly among the gateway streams."""
    total = streams + control
    direct = {round((i + 0.5) * total / control) for i in range(control)} if control else set()
    return [i in direct for i in range(total)]


async def _monitor(cfg: HoldConfig, state: _Open, gateway: Child, emulator: Child, out: HoldResult) -> None:
    last_reading = 0.0
    while True:
        await asyncio.sleep(MONITOR_S)
        out.most_open = max(out.most_open, state.opened - state.ended)
        now = time.perf_counter()
        if state.opened == cfg.streams and state.ended == 0 and now - last_reading >= READING_S:
            last_reading = now
            out.rss_open_mb.append(gateway.rss_mb())
            out.files_open.append(gateway.open_files())
            out.emulator_rss_open_mb.append(emulator.rss_mb())


async def hold_streams(cfg: HoldConfig, gateway: Child, emulator: Child) -> HoldResult:
    """Run phase 1 and return every stream's outcome and the readings taken while all were open."""
    state = _Open()
    out = HoldResult([], [])
    timeout = client_timeout(total_s=cfg.ramp_s + 2 * cfg.hold_s + 120, read_s=max(30.0, 10 * cfg.interval_s))
    body = message_body(LONG_PROMPT, cfg.max_tokens, stream=True)
    plan = schedule(cfg.streams, cfg.control)

    def opened() -> None:
        state.opened += 1
        if state.opened == cfg.streams:
            state.t_all_open = time.perf_counter()

    async def one(session: aiohttp.ClientSession, direct: bool, start_at: float) -> None:
        await asyncio.sleep(max(0.0, start_at - time.perf_counter()))
        if direct:
            url, key, first = emulator.url + MESSAGES, UPSTREAM_KEY, None
        else:
            url, key, first = gateway.url + MESSAGES, CLIENT_KEY, opened
        ex = await exchange(
            session, url, body, headers(key), kind="direct" if direct else "gateway",
            stream=True, expect_deltas=cfg.deltas, on_first=first,
        )  # fmt: skip
        if direct:
            out.direct.append(ex)
            return
        out.gateway.append(ex)
        if ex.t_first is None:  # never opened: it cannot hold the others' window open
            opened()
        state.ended += 1
        if state.t_first_end is None:
            state.t_first_end = time.perf_counter()

    connector = aiohttp.TCPConnector(limit=0, force_close=True)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        monitor = asyncio.create_task(_monitor(cfg, state, gateway, emulator, out))
        t0 = time.perf_counter()
        step = cfg.ramp_s / max(1, len(plan) - 1)
        try:
            await asyncio.gather(*(one(session, direct, t0 + i * step) for i, direct in enumerate(plan)))
        finally:
            monitor.cancel()
    out.all_open_at, out.first_end_at = state.t_all_open, state.t_first_end
    return out
