"""Run async servers (gateway, emulator) on an event loop in a background thread.

Lets synchronous clients (the sync ``anthropic`` SDK) talk to real sockets in tests.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    """An event loop running forever in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="test-loop", daemon=True)
        self._thread.start()
        self._exits: list[Callable[[], Coroutine[Any, Any, Any]]] = []

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def enter(self, manager: AbstractAsyncContextManager[T]) -> T:
        """Enter an async context manager on the loop; it is exited by ``close``."""
        value = self.run(manager.__aenter__())
        self._exits.append(lambda: manager.__aexit__(None, None, None))
        return value

    def close(self) -> None:
        while self._exits:
            self.run(self._exits.pop()())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()
