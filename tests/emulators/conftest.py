"""Fixtures for the emulator tests: real sockets, the real SDK, no internet, no sleeping."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator

import anthropic
import pytest

from emulators import (
    DEFAULT_API_KEY,
    EmulatorConfig,
    ManualClock,
    RunningEmulator,
    emulator_in_thread,
    run_emulator,
)

_AMBIENT_PREFIXES = ("ANTHROPIC_", "AWS_", "GOOGLE_", "CLOUD_ML_")


@pytest.fixture(autouse=True)
def _no_ambient_provider_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep the SDK from picking up keys, base URLs or cloud config from the environment."""
    for name in list(os.environ):
        if name.startswith(_AMBIENT_PREFIXES):
            monkeypatch.delenv(name, raising=False)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def config(clock: ManualClock) -> EmulatorConfig:
    return EmulatorConfig(clock=clock, retry_after_ms=1)


@pytest.fixture
async def emu(config: EmulatorConfig) -> AsyncIterator[RunningEmulator]:
    """An emulator on a free port in the test's event loop."""
    async with run_emulator(config, host="127.0.0.1", port=0) as running:
        yield running


@pytest.fixture
def threaded_emu(config: EmulatorConfig) -> Iterator[RunningEmulator]:
    """An emulator in a background thread, for synchronous SDK clients."""
    with emulator_in_thread(config, host="127.0.0.1", port=0) as running:
        yield running


@pytest.fixture
def client(threaded_emu: RunningEmulator) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(api_key=DEFAULT_API_KEY, base_url=threaded_emu.base_url, max_retries=0) as sdk:
        yield sdk


@pytest.fixture
async def aclient(emu: RunningEmulator) -> AsyncIterator[anthropic.AsyncAnthropic]:
    async with anthropic.AsyncAnthropic(api_key=DEFAULT_API_KEY, base_url=emu.base_url, max_retries=0) as sdk:
        yield sdk
