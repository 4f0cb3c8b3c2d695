"""The loop's injectable dependencies: five small protocols, each with a production default.

* ``call_model``: a request in, Anthropic stream event dicts (and ``StatusEvent``s) out. Default:
  the gateway's configured provider, in process (``loop.callers.ProviderModelCaller``), built from
  the environment when the run starts and closed when it ends.
* ``compact`` / ``microcompact``: rewrite the history before a request. The defaults keep it as it
  is; they are the seam the compaction work plugs into (microcompact then compact run, in that
  order, before every request).
* ``uuid``: request ids.
* ``clock``: ``now``, ``sleep`` and ``timeout``; guardrails and tool timeouts use it, so a
  ``loop.testing.VirtualClock`` makes them deterministic.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Protocol

from loop.config import LoopConfig
from loop.events import StatusEvent
from loop.messages import JSONObject, Message
from loop.request import ModelRequest

ModelStreamItem = JSONObject | StatusEvent


class ModelCaller(Protocol):
    """Sends one request; yields its stream events as dicts, exactly as the API's SSE ``data``.

    Errors are events too, never exceptions: an HTTP error status or a failed connection is one
    ``{"type": "error", "error": {"type", "message"}, "status": <int>}`` dict; a mid-stream failure
    is the API's own ``error`` event (no ``status``).
    """

    def __call__(self, request: ModelRequest) -> AsyncIterator[ModelStreamItem]: ...


class Compactor(Protocol):
    async def __call__(self, messages: tuple[Message, ...], config: LoopConfig) -> tuple[Message, ...]: ...


class Clock(Protocol):
    def now(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...

    def timeout(self, seconds: float) -> AbstractAsyncContextManager[object]:
        """Like ``asyncio.timeout``: raises ``TimeoutError`` when the block outlives ``seconds``."""
        ...


class SystemClock:
    """Monotonic time and the event loop's own timers."""

    def now(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def timeout(self, seconds: float) -> AbstractAsyncContextManager[object]:
        return asyncio.timeout(seconds)


async def keep_history(messages: tuple[Message, ...], config: LoopConfig) -> tuple[Message, ...]:
    """The default compactor and microcompactor: the history unchanged."""
    return messages


def new_request_id() -> str:
    return f"req_loop_{uuid.uuid4().hex}"


@dataclass(frozen=True, slots=True)
class LoopDeps:
    call_model: ModelCaller | None = None
    """``None``: the gateway provider configured by the environment (owned by the run)."""
    compact: Compactor = keep_history
    microcompact: Compactor = keep_history
    uuid: Callable[[], str] = new_request_id
    clock: Clock = field(default_factory=SystemClock)
