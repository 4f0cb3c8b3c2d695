"""Test support for the model catalogue: a ``sleep`` the test advances step by step."""

from __future__ import annotations

import asyncio


class StepSleep:
    """An injected ``sleep``: each call waits until the test releases one step (no real waiting)."""

    def __init__(self) -> None:
        self.calls: list[float] = []
        self._steps: asyncio.Queue[None] = asyncio.Queue()
        self._asleep = asyncio.Event()

    async def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)
        self._asleep.set()
        await self._steps.get()

    async def step(self) -> None:
        """Wake the sleeper once and wait until it is asleep again (its work in between done)."""
        await asyncio.wait_for(self._asleep.wait(), 5)
        self._asleep.clear()
        self._steps.put_nowait(None)
        await asyncio.wait_for(self._asleep.wait(), 10)
