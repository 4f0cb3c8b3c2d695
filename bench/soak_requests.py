"""The soak's requests: bodies and headers, one timed exchange (SSE events timed as they arrive),
and sizing the emulator's scripted answer to a number of stream deltas.

Long streams use the scripted model's ``max_tokens`` scenario (``[[scenario:max_tokens]]`` in the
prompt: filler text until the ``max_tokens`` budget), which the emulator streams as one
``content_block_delta`` per three words, each after its ``--chunk-delay``. How many deltas a
budget gives is read from the emulator itself (:func:`max_tokens_for`), so a stream lasts
``deltas x --chunk-delay`` seconds.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

import aiohttp
import orjson

from bench.processes import BenchError
from emulators.events import split_words

MODEL: Final = "claude-sonnet-4-5"
MESSAGES: Final = "/v1/messages"
COUNT_TOKENS: Final = "/v1/messages/count_tokens"
LONG_PROMPT: Final = (
    "[[scenario:max_tokens]] Describe how a gateway relays a long-lived server-sent event stream."
)
MAX_FILL_TOKENS: Final = 4096  # the scripted model writes at most this much filler
SESSION_HEADER: Final = "x-claude-code-session-id"


def headers(key: str, *, session: str | None = None, json_body: bool = True) -> dict[str, str]:
    out = {"x-api-key": key, "anthropic-version": "2023-06-01", "user-agent": "switchyard-soak/1"}
    if json_body:
        out["content-type"] = "application/json"
    if session is not None:
        out[SESSION_HEADER] = session
    return out


def message_body(
    prompt: str, max_tokens: int, *, stream: bool = False, system: Any = None, model: str = MODEL
) -> bytes:
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": prompt}],
    }
    if system is not None:
        body["system"] = system
    if stream:
        body["stream"] = True
    return orjson.dumps(body)


@dataclass
class Exchange:
    """One request's outcome; ``error`` is None when it was answered as expected."""

    kind: str
    t_sent: float  # perf_counter()
    status: int = 0
    error: str | None = None
    t_first: float | None = None  # first body byte (the first event of a stream)
    t_end: float = 0.0
    delta_at: list[float] = field(default_factory=list)  # arrival of each content_block_delta

    @property
    def deltas(self) -> int:
        return len(self.delta_at)

    def timed_gaps(self, start: float = -math.inf, end: float = math.inf) -> list[tuple[float, float]]:
        """``(arrival, gap)`` of every gap between consecutive content deltas whose second delta
        arrived within [start, end]."""
        return [(b, b - a) for a, b in itertools.pairwise(self.delta_at) if start <= b <= end]

    def gaps(self, start: float = -math.inf, end: float = math.inf) -> list[float]:
        return [gap for _, gap in self.timed_gaps(start, end)]

    @property
    def latency(self) -> float:
        return self.t_end - self.t_sent

    @property
    def ttfb(self) -> float | None:
        return None if self.t_first is None else self.t_first - self.t_sent


class _EventTimer:
    """Splits an SSE body into events as chunks arrive; times the content deltas."""

    def __init__(self, ex: Exchange) -> None:
        self.ex = ex
        self.buf = b""
        self.names: list[str] = []

    def feed(self, chunk: bytes, now: float) -> None:
        self.buf += chunk
        while (end := self.buf.find(b"\n\n")) >= 0:
            frame, self.buf = self.buf[:end], self.buf[end + 2 :]
            if frame.startswith(b"event: "):
                self.event(frame[7:].split(b"\n", 1)[0].decode(errors="replace"), now)

    def event(self, name: str, now: float) -> None:
        self.names.append(name)
        if name == "content_block_delta":
            self.ex.delta_at.append(now)

    def verdict(self, expect_deltas: int | None) -> str | None:
        if "error" in self.names:
            return "stream error event"
        if not self.names or self.names[-1] != "message_stop":
            return "stream without message_stop"
        if expect_deltas is not None and self.ex.deltas != expect_deltas:
            return f"{self.ex.deltas} deltas, expected {expect_deltas}"
        return None


async def exchange(
    session: aiohttp.ClientSession,
    url: str,
    body: bytes,
    hdrs: dict[str, str],
    *,
    kind: str,
    expect: int = 200,
    stream: bool = False,
    expect_deltas: int | None = None,
    on_first: Callable[[], None] | None = None,
) -> Exchange:
    """POST ``body``; read the whole answer (timing each SSE event when ``stream``). Every failure
    (unexpected status, stream error event, missing ``message_stop``, connection error, timeout)
    is recorded in ``Exchange.error``, never raised."""
    ex = Exchange(kind, time.perf_counter())
    try:
        async with session.post(url, data=body, headers=hdrs) as resp:
            ex.status = resp.status
            timer = _EventTimer(ex) if stream and resp.status == 200 else None
            async for chunk in resp.content.iter_any():
                now = time.perf_counter()
                if ex.t_first is None:
                    ex.t_first = now
                    if on_first is not None:
                        on_first()
                if timer is not None:
                    timer.feed(chunk, now)
            ex.t_end = time.perf_counter()
        if ex.status != expect:
            ex.error = f"status {ex.status}"
        elif timer is not None:
            ex.error = timer.verdict(expect_deltas)
    except (aiohttp.ClientError, OSError) as exc:
        ex.error = f"connection: {type(exc).__name__}"
    except TimeoutError:
        ex.error = "timeout"
    if not ex.t_end:
        ex.t_end = time.perf_counter()
    return ex


async def _answer_deltas(session: aiohttp.ClientSession, emulator_url: str, key: str, max_tokens: int) -> int:
    """How many text deltas the emulator streams for :data:`LONG_PROMPT` with ``max_tokens``:
    its non-streaming answer is the same text, cut into deltas by the emulator's own splitter."""
    body = message_body(LONG_PROMPT, max_tokens)
    async with session.post(emulator_url + MESSAGES, data=body, headers=headers(key)) as resp:
        raw = await resp.read()
        if resp.status != 200:
            raise BenchError(f"emulator answered {resp.status} to the sizing request: {raw[:200]!r}")
    message = orjson.loads(raw)
    return sum(len(split_words(b["text"])) for b in message["content"] if b.get("type") == "text")


async def max_tokens_for(
    session: aiohttp.ClientSession, emulator_url: str, key: str, deltas: int
) -> tuple[int, int]:
    """The smallest ``max_tokens`` whose long-prompt stream has at least ``deltas`` text deltas
    (binary search against the emulator, unpaced non-streaming requests); and that count."""
    most = await _answer_deltas(session, emulator_url, key, MAX_FILL_TOKENS)
    if most < deltas:
        raise BenchError(
            f"the scripted model streams at most {most} deltas; ask for fewer (a longer --event-interval)"
        )
    lo, hi, found = 1, MAX_FILL_TOKENS, most
    while lo < hi:
        mid = (lo + hi) // 2
        count = await _answer_deltas(session, emulator_url, key, mid)
        if count >= deltas:
            hi, found = mid, count
        else:
            lo = mid + 1
    return hi, found


def client_timeout(total_s: float, read_s: float) -> aiohttp.ClientTimeout:
    return aiohttp.ClientTimeout(total=total_s, sock_connect=30.0, sock_read=read_s)
