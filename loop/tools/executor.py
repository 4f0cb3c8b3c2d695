"""Running one response's tool calls, starting safe ones while the response still streams.

A safe call starts early only if every earlier call of the response is safe too (a read after an
edit must see it); state-changing calls run one at a time; results come back in call order.

Details: docs/internals/loop-tools.md
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass

from loop.deps import Clock
from loop.events import TaskUpdate, ToolEvent, ToolFinished, ToolStarted
from loop.messages import Block
from loop.outcome import ToolUse
from loop.tools.dispatcher import PreparedCall, ToolDispatcher


@dataclass(slots=True)
class _Call:
    tool_use: ToolUse
    prepared: PreparedCall | None
    """``None`` when the call failed validation; ``result`` then already holds the answer."""
    safe: bool
    result: Block | None = None
    task: asyncio.Task[None] | None = None
    reused: bool = False


ExecutorEvent = ToolEvent | TaskUpdate


class StreamingToolExecutor:
    def __init__(
        self,
        dispatcher: ToolDispatcher,
        *,
        turn: int,
        clock: Clock,
        max_concurrency: int,
        reuse: Mapping[str, Block] | None = None,
    ) -> None:
        self._dispatcher = dispatcher
        self._turn = turn
        self._clock = clock
        self._calls: list[_Call] = []
        self._events: asyncio.Queue[ExecutorEvent | None] = asyncio.Queue()
        self._slots = asyncio.Semaphore(max_concurrency)
        self._reuse = dict(reuse or {})
        self._interrupted = False

    def submit(self, tool_use: ToolUse) -> None:
        if self._reuse:
            from loop.advance import tool_signature

            earlier = self._reuse.pop(tool_signature(tool_use), None)
            if earlier is not None:
                self._calls.append(
                    _Call(tool_use, None, True, {**earlier, "tool_use_id": tool_use.id}, reused=True)
                )
                return
        prepared = self._dispatcher.prepare(tool_use)
        if isinstance(prepared, PreparedCall):
            call = _Call(tool_use, prepared, self._dispatcher.is_concurrency_safe(prepared))
        else:
            call = _Call(tool_use, None, safe=True, result=prepared)
        self._calls.append(call)
        if call.prepared is not None and all(c.safe for c in self._calls):
            self._start(call)

    def emit(self, event: TaskUpdate) -> None:
        """Put a tool's own event (a sub-agent's state change) on the progress stream."""
        self._events.put_nowait(event)

    def interrupt(self) -> None:
        """Make ``finish`` return at once (a submit-interrupt); running calls go on until
        ``cancel``."""
        self._interrupted = True
        self._events.put_nowait(None)  # wakes ``_next_event``

    def _stopped(self) -> bool:
        return self._interrupted

    def drain(self) -> list[ExecutorEvent]:
        events: list[ExecutorEvent] = []
        while not self._events.empty():
            event = self._events.get_nowait()
            if event is not None:
                events.append(event)
        return events

    async def finish(self) -> AsyncGenerator[ExecutorEvent, None]:
        for call in self._calls:
            if self._stopped():
                return
            if call.prepared is None:
                assert call.result is not None
                self._events.put_nowait(self._finished(call, call.result, 0.0))
            elif call.task is None and call.safe:
                self._start(call)
            elif call.task is None:
                while (event := await self._next_event()) is not None:  # everything before it...
                    yield event
                if self._stopped():
                    return
                self._start(call)
                while (event := await self._next_event()) is not None:  # ...then the call alone
                    yield event
        while (event := await self._next_event()) is not None:
            yield event

    def results(self) -> list[Block]:
        """Every call's result, in call order (after ``finish``)."""
        missing = [c.tool_use.id for c in self._calls if c.result is None]
        if missing:
            raise RuntimeError(f"tool calls without a result: {missing}")
        return [c.result for c in self._calls if c.result is not None]

    def finished_results(self) -> dict[str, Block]:
        """Results known so far (for an interrupted turn)."""
        return {c.tool_use.id: c.result for c in self._calls if c.result is not None}

    def unfinished_ids(self) -> tuple[str, ...]:
        return tuple(c.tool_use.id for c in self._calls if c.result is None)

    async def wait_started(self) -> None:
        """Let the calls already running finish (nothing new starts)."""
        running = [t for t in self._tasks() if not t.done()]
        if running:
            await asyncio.gather(*running, return_exceptions=True)

    def ran(self) -> dict[str, Block]:
        """The results of calls that ran (or reused an earlier run), by ``tool_signature``."""
        from loop.advance import tool_signature

        return {
            tool_signature(c.tool_use): c.result
            for c in self._calls
            if c.result is not None and (c.task is not None or c.reused)
        }

    async def cancel(self) -> None:
        tasks = [t for t in self._tasks() if not t.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    def _tasks(self) -> list[asyncio.Task[None]]:
        return [c.task for c in self._calls if c.task is not None]

    def _start(self, call: _Call) -> None:
        call.task = asyncio.create_task(self._execute(call), name=f"tool:{call.tool_use.name}")

    async def _execute(self, call: _Call) -> None:
        assert call.prepared is not None
        async with self._slots:
            started = self._clock.now()
            tool_use = call.tool_use
            self._events.put_nowait(ToolStarted(self._turn, tool_use.id, tool_use.name, started))
            result = await self._dispatcher.run(call.prepared, self._turn)
            call.result = result
            self._events.put_nowait(self._finished(call, result, self._clock.now() - started))

    def _finished(self, call: _Call, result: Block, duration_s: float) -> ToolFinished:
        return ToolFinished(self._turn, call.tool_use.id, call.tool_use.name, result, duration_s)

    async def _next_event(self) -> ExecutorEvent | None:
        """The next progress event; ``None`` once every started call is done and none is left
        (or after ``interrupt``)."""
        while True:
            if self._stopped():
                return None
            if not self._events.empty():
                event = self._events.get_nowait()
                if event is None:
                    continue
                return event
            pending = [t for t in self._tasks() if not t.done()]
            if not pending:
                return None
            getter = asyncio.ensure_future(self._events.get())
            try:
                await asyncio.wait({*pending, getter}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                if not getter.done():
                    getter.cancel()
            for task in pending:
                if task.done() and not task.cancelled():
                    task.result()  # dispatcher.run never raises: a failure here is a bug, surface it
            if getter.done() and not getter.cancelled():
                event = getter.result()
                if event is None:
                    continue
                return event
