"""Hostile-input tests: raw sockets against a real gateway in front of the emulator."""

from __future__ import annotations

import gc
import logging
from collections.abc import Iterator

import pytest

from tests.support.gateway_stack import Connect, GatewayStack, StackFactory, start_stack
from tests.support.raw_http import RawConnection
from tests.support.threaded import LoopThread


@pytest.fixture
def make_stack(loop_thread: LoopThread) -> StackFactory:
    def factory(**env: str) -> GatewayStack:
        return start_stack(loop_thread, **env)

    return factory


@pytest.fixture
def connect() -> Iterator[Connect]:
    opened: list[RawConnection] = []

    def factory(stack: GatewayStack) -> RawConnection:
        connection = RawConnection("127.0.0.1", stack.port)
        opened.append(connection)
        return connection

    yield factory
    for connection in opened:
        connection.close()


@pytest.fixture(autouse=True)
def access_log_on(caplog: pytest.LogCaptureFixture) -> None:
    """The access log is written (its level is INFO) and every warning is captured to be checked."""
    caplog.set_level(logging.INFO, logger="switchyard.access")
    # Cyclic garbage of earlier tests (an SDK client left open) is collected now, on a thread with
    # no running loop, so it cannot log an unrelated traceback into this test's capture later.
    gc.collect()
