"""The loop's injectable dependencies, each with a production default.

Anything a test must control (model caller, context layers, ids, clock, prices) comes through
here; guardrails and tool timeouts use ``clock``, so a ``VirtualClock`` makes them deterministic.

Details: docs/internals/loop.md
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Protocol

from gateway.pricing import DEFAULT_TABLE, PriceTable
from loop.context.layers import DEFAULT_LAYERS, ContextLayer
from loop.events import StatusEvent
from loop.messages import JSONObject
from loop.request import ModelRequest

ModelStreamItem = JSONObject | StatusEvent


class ModelCaller(Protocol):
    """Sends one request; yields its stream events as dicts, exactly as the API's SSE ``data``.

    Errors are events too, never exceptions: an HTTP error status or a failed connection is one
    ``{"type": "error", "error": {"type", "message"}, "status": <int>}`` dict; a mid-stream failure
    is the API's own ``error`` event (no ``status``).
    """

    def __call__(self, request: ModelRequest) -> AsyncIterator[ModelStreamItem]: ...


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


def new_request_id() -> str:
    return f"req_loop_{uuid.uuid4().hex}"


@dataclass(frozen=True, slots=True)
class LoopDeps:
    call_model: ModelCaller | None = None
    """``None``: the gateway provider configured by the environment (owned by the run)."""
    layers: tuple[ContextLayer, ...] = DEFAULT_LAYERS
    uuid: Callable[[], str] = new_request_id
    clock: Clock = field(default_factory=SystemClock)
    prices: PriceTable = DEFAULT_TABLE
