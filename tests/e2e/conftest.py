"""Fixtures for the end-to-end tests: client -> gateway -> emulator on loopback sockets, both
servers in one loop thread (``tests.support.sdk_stack``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from emulators import EmulatorConfig
from tests.support.sdk_stack import Stack, StackFactory, start_sdk_stack
from tests.support.threaded import LoopThread


@pytest.fixture
def make_stack(loop_thread: LoopThread, tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackFactory]:
    def factory(emulator_config: EmulatorConfig | None = None, **env: str) -> Stack:
        return start_sdk_stack(loop_thread, tmp_path_factory.mktemp("keys"), emulator_config, **env)

    yield factory


@pytest.fixture
def stack(make_stack: StackFactory) -> Stack:
    return make_stack()
