"""Sections for the prompt-assembly tests (``tests/loop/prompt/``) that count how often they run."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from loop.prompt import PromptInputs


class Counter:
    """A ``compute`` that returns fixed text and counts its calls (sync, or async with ``delay``)."""

    def __init__(self, text: str | None) -> None:
        self.text = text
        self.calls = 0

    def __call__(self) -> str | None:
        self.calls += 1
        return self.text


class AsyncCounter(Counter):
    def __init__(self, text: str | None, delay: float = 0.0) -> None:
        super().__init__(text)
        self.delay = delay

    async def __call__(self) -> str | None:  # type: ignore[override]
        self.calls += 1
        await asyncio.sleep(self.delay)
        return self.text


def reading(name: str, render: Callable[[object], str] = str) -> Callable[[PromptInputs], str]:
    """A ``compute`` whose text depends on the input ``name``."""

    def compute(inputs: PromptInputs) -> str:
        return f"{name}={render(inputs[name])}"

    return compute
