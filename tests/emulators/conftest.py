"""Fixtures for the emulator tests: real sockets, the real SDK, no internet, no sleeping."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

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

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "real-clients"
_AMBIENT_PREFIXES = ("ANTHROPIC_", "AWS_", "GOOGLE_", "CLOUD_ML_")
MODEL = "claude-sonnet-4-6"
"""A current (non-deprecated) model with a 2048-token cache minimum."""


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


def block(message: Any, index: int) -> Any:
    """Content block ``index`` of an SDK message, untyped (tests assert its type themselves)."""
    return message.content[index]


def body_of(error: anthropic.APIStatusError) -> dict[str, Any]:
    """The decoded JSON body of an SDK status error."""
    assert isinstance(error.body, dict)
    return error.body


def load_real_client_fixture(name: str) -> dict[str, Any]:
    """A captured request (``headers`` as [name, value] pairs, ``body``, ``raw_path``) by file stem."""
    data: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return data


def replay_headers(fixture: dict[str, Any], api_key: str = DEFAULT_API_KEY) -> list[tuple[str, str]]:
    """The fixture's headers in order, minus hop-by-hop ones, with a valid ``x-api-key``."""
    skip = {"content-length", "host", "connection", "accept-encoding", "x-api-key", "authorization"}
    headers = [(k, v) for k, v in fixture["headers"] if k.lower() not in skip]
    headers.append(("x-api-key", api_key))
    return headers


@pytest.fixture
def real_client_fixture() -> Callable[[str], dict[str, Any]]:
    return load_real_client_fixture
