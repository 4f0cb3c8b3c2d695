"""``Run``: what ``loop.query`` returns. An async iterator of events with a typed result.

Nothing starts before the first ``__anext__``; aborting leaves a well-formed history ending with
an interruption message, while ``submit`` interrupts without one.

Details: docs/internals/loop.md
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable, Sequence
from types import TracebackType
from typing import Any

from loop.events import LoopEvent
from loop.messages import Message, user_message
from loop.observer import RunObserver, notify_event, notify_terminal
from loop.state import LoopState, initial_state
from loop.transitions import AbortedStreaming, Terminal


class Run:
    def __init__(
        self,
        start: Callable[[Run], AsyncGenerator[LoopEvent, None]],
        initial_messages: tuple[Message, ...],
        observers: Sequence[RunObserver] = (),
    ) -> None:
        self._start = start
        self._observers = tuple(observers)
        self._events: AsyncGenerator[LoopEvent, None] | None = None
        self._closed = False
        self.initial_messages = initial_messages
        self._terminal: Terminal | None = None
        self._state: LoopState | None = None
        self.output: Any = None
        """The validated final answer of a run with an output type (``QueryParams.output_type``);
        ``None`` otherwise, and until the run completes."""
        self._submitted: list[Message] = []
        self._on_submit: Callable[[], None] | None = None
        self._stepping: asyncio.Task[Any] | None = None
        """The task waiting for the next event, while one does."""
        self._stop: asyncio.Event | None = None
        """Set by ``aclose`` from another task: that step was cancelled (and it has ended)."""

    def submit(self, message: str | Message) -> None:
        """A new user message for the running agent (see the module docstring). Before the run
        starts, it is simply appended to the initial messages; after it ends, ``RuntimeError``."""
        if self.finished:
            raise RuntimeError("the run has finished: start a new one with its messages")
        self._submitted.append(user_message(message) if isinstance(message, str) else message)
        if self._on_submit is not None:
            self._on_submit()

    def has_submitted(self) -> bool:
        """Messages were submitted that the loop has not taken yet."""
        return bool(self._submitted)

    def take_submitted(self) -> tuple[Message, ...]:
        """For the loop: the submitted messages, once."""
        taken, self._submitted = tuple(self._submitted), []
        return taken

    def on_submit(self, callback: Callable[[], None] | None) -> None:
        """For the loop: called on every ``submit`` (wakes a turn waiting for its tools)."""
        self._on_submit = callback

    def __aiter__(self) -> Run:
        return self

    async def __anext__(self) -> LoopEvent:
        if self._events is None:
            if self._closed:
                raise StopAsyncIteration
            self._events = self._start(self)
        self._stepping = asyncio.current_task()
        try:
            try:
                event = await self._events.__anext__()
            except asyncio.CancelledError:
                if self._stop is None:
                    raise
                _uncancel()  # aclose() from another task cancelled this step: the run ends there
                raise StopAsyncIteration from None
            finally:
                self._stepping = None
            if self._stop is not None:  # the step swallowed the cancellation: end the run now
                _uncancel()
                await self._events.aclose()
                raise StopAsyncIteration
        finally:
            if self._stop is not None:
                self._stop.set()  # the run has settled
        if self._observers:
            notify_event(self._observers, event)
        return event

    async def aclose(self) -> None:
        """Abort the run (a no-op once it has finished). From another task than the consumer's
        (a stop button) while the consumer waits for an event, the consumer's step is cancelled:
        its iteration ends (no ``CancelledError``) and this returns once the run has settled."""
        if self._events is None:
            if not self._closed and self._terminal is None:
                self.settle(AbortedStreaming(turn=0), initial_state(self.initial_messages, 0.0))
            self._closed = True
            return
        stepping = self._stepping
        if stepping is not None and stepping is not asyncio.current_task():
            if self._stop is None:
                self._stop = asyncio.Event()
                stepping.cancel()
            await self._stop.wait()
            return
        await self._events.aclose()

    async def wait(self) -> Terminal:
        """Consume the remaining events; the terminal."""
        async for _ in self:
            pass
        return self.terminal

    async def __aenter__(self) -> Run:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    @property
    def finished(self) -> bool:
        return self._terminal is not None

    @property
    def terminal(self) -> Terminal:
        """Why the run stopped. Raises ``RuntimeError`` while it is still running."""
        if self._terminal is None:
            raise RuntimeError("the run has not finished: iterate it to the end (or await run.wait())")
        return self._terminal

    @property
    def state(self) -> LoopState:
        """The final state (history, usage, turn count, transitions)."""
        if self._state is None:
            raise RuntimeError("the run has not finished: iterate it to the end (or await run.wait())")
        return self._state

    @property
    def messages(self) -> list[Message]:
        """The final history; every ``tool_use`` in it has its ``tool_result``."""
        return list(self.state.messages)

    def settle(self, terminal: Terminal, state: LoopState) -> None:
        """Called once by the loop's generator (first call wins)."""
        if self._terminal is None:
            self._terminal = terminal
            self._state = state
            if self._observers:
                notify_terminal(self._observers, terminal)


def _uncancel() -> None:
    """Take back the cancellation ``aclose`` requested of the consumer's task."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        task.uncancel()
