"""Waiting for something another thread or task does (the server's loop thread writes the access
line just after the client has the last byte of the answer; a store writes in the background)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def wait_until(probe: Callable[[], T], *, timeout_s: float = 10.0) -> T:
    """``probe()``'s first truthy value, polled every 5 ms; fails the test after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout_s} s (last value {value!r})")
        time.sleep(0.005)


async def until(predicate: Callable[[], Any], timeout_s: float = 5.0) -> None:
    """Wait (polling every 10 ms) until ``await predicate()`` is true; fails after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not await predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.01)
