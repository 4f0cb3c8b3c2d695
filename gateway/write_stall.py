"""The write-stall bound: a client that stops reading is disconnected, and its upstream released.

One timer per streamed response, one clock read per write; past ``GATEWAY_WRITE_STALL_TIMEOUT_S``
the connection is aborted and the half-read upstream connection is closed, never pooled.

Details: docs/internals/gateway.md
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Final

from aiohttp import web

# the transport's default high-water mark (asyncio and uvloop): an answer no larger than this,
# written to an idle connection, never waits for the client
WAIT_FREE_BYTES: Final = 64 * 1024


def stall_failure(stalled_s: float) -> str:
    """The access log's ``failure`` for a client disconnected by the bound."""
    return f"client stopped reading: a write waited {stalled_s:.1f}s for it to drain its socket"


class WriteStall:
    """One response's write watch: ``on_stall(seconds)`` when a write has waited ``bound_s``."""

    __slots__ = ("_bound_s", "_loop", "_on_stall", "_timer", "now", "since")

    def __init__(self, bound_s: float, on_stall: Callable[[float], None]) -> None:
        self._loop = asyncio.get_running_loop()
        self.now: Callable[[], float] = self._loop.time
        self.since: float | None = None  # when the pending write began (loop time), if one is pending
        self._bound_s = bound_s
        self._on_stall = on_stall
        self._timer: asyncio.TimerHandle | None = self._loop.call_at(self.now() + bound_s, self._check)

    def _check(self) -> None:
        since, now = self.since, self.now()
        if since is not None and now - since >= self._bound_s:
            self._timer = None
            self._on_stall(now - since)
            return
        self._timer = self._loop.call_at((now if since is None else since) + self._bound_s, self._check)

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


def may_wait(response: web.StreamResponse) -> bool:
    """Whether writing this whole (not yet prepared) answer can wait for the client: only one
    larger than ``WAIT_FREE_BYTES`` (or not a plain body) can. (The body, not ``content_length``,
    which costs a header lookup: this runs for every answer.)"""
    body = response.body if isinstance(response, web.Response) else None
    return not isinstance(body, bytes) or len(body) > WAIT_FREE_BYTES


async def send_bounded(response: web.StreamResponse, request: web.Request, bound_s: float) -> float | None:
    """Send a whole (not yet prepared) answer as one write bounded by ``bound_s``: ``None`` once
    sent, else the seconds it waited in vain for the client (the write was abandoned; the caller
    closes the connection)."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        async with asyncio.timeout(bound_s):
            await response.prepare(request)
            await response.write_eof()
    except TimeoutError:
        return loop.time() - started
    return None
