"""Graceful-shutdown state shared by readiness, the process runner and the open streams.

On SIGTERM the runner (``process.serve``) calls ``begin``: ``/readyz`` answers 503 from then on.
When the drain deadline passes (or a second signal arrives) it calls ``expire``: every stream still
open is woken through the future it got from ``watch`` and ends itself with an SSE ``error`` event
instead of being cut when the process exits.

One ``Drain`` belongs to one application (``DRAIN_KEY``); it only holds state and futures, so it
costs nothing until a shutdown starts.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Final

from aiohttp import web

SHUTDOWN_MESSAGE: Final = "gateway shutting down; retry the request"


class Drain:
    """Whether the process is shutting down, and whether its drain deadline has passed."""

    def __init__(self) -> None:
        self._draining = False
        self._expired = False
        self._watchers: set[asyncio.Future[None]] = set()

    @property
    def draining(self) -> bool:
        """True from the first shutdown signal on: readiness fails."""
        return self._draining

    @property
    def expired(self) -> bool:
        """True once the drain deadline has passed: open streams end now."""
        return self._expired

    def begin(self) -> None:
        self._draining = True

    def expire(self) -> None:
        """The deadline passed: wake every watcher (idempotent)."""
        self._draining = True
        self._expired = True
        for future in self._watchers:
            if not future.done():
                future.set_result(None)

    @contextlib.contextmanager
    def watch(self) -> Iterator[asyncio.Future[None]]:
        """A future that completes when the deadline passes, valid for the block (one per stream).

        Each stream gets its own future so that waiting on it costs the same whatever the number
        of open streams.
        """
        future = self.open_watch()
        try:
            yield future
        finally:
            self.close_watch(future)

    def open_watch(self) -> asyncio.Future[None]:
        """``watch`` without the context manager (the stream relay's hot path): a future that
        completes when the deadline passes; give it back to ``close_watch``."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self._expired:
            future.set_result(None)
        self._watchers.add(future)
        return future

    def close_watch(self, future: asyncio.Future[None]) -> None:
        self._watchers.discard(future)
        if not future.done():
            future.cancel()

    @property
    def watching(self) -> int:
        """Streams currently watching the deadline."""
        return len(self._watchers)


DRAIN_KEY: Final = web.AppKey("drain", Drain)
