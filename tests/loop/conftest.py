"""A real stack on loopback, in the test's own event loop: emulator, and a gateway in front of it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from emulators import EmulatorConfig, RunningEmulator, run_emulator
from gateway.config import Settings
from gateway.server import create_app
from gateway.service import running

GATEWAY_KEY = "sk-gw-loop-tests"
UPSTREAM_KEY = "sk-upstream-loop-tests"
MAX_RETRIES = 2
"""Both the gateway server and the in-process provider caller retry twice, 1 ms apart."""


@dataclass(frozen=True)
class LoopStack:
    emulator: RunningEmulator
    gateway_url: str

    def upstream_environ(self) -> dict[str, str]:
        """The environment that points the in-process provider at the emulator."""
        return {
            "ANTHROPIC_API_KEY": UPSTREAM_KEY,
            "ANTHROPIC_BASE_URL": self.emulator.base_url,
            "GATEWAY_MAX_RETRIES": str(MAX_RETRIES),
        }


@pytest.fixture
async def emulator() -> AsyncIterator[RunningEmulator]:
    config = EmulatorConfig(api_keys=frozenset({UPSTREAM_KEY}), retry_after_ms=1.0)
    async with run_emulator(config, port=0) as emu:
        yield emu


@pytest.fixture
async def stack(emulator: RunningEmulator) -> AsyncIterator[LoopStack]:
    settings = Settings.from_environ(
        {
            "GATEWAY_API_KEYS": GATEWAY_KEY,
            "ANTHROPIC_API_KEY": UPSTREAM_KEY,
            "ANTHROPIC_BASE_URL": emulator.base_url,
            "GATEWAY_MAX_RETRIES": str(MAX_RETRIES),
            # the SDK caller (max_retries=0) sends x-stainless-retry-count like every SDK client:
            # the gateway's full budget for it, as for the in-process caller
            "GATEWAY_CLIENT_RETRYING_MAX_RETRIES": str(MAX_RETRIES),
        }
    )
    async with running(create_app(settings), "127.0.0.1", 0) as server:
        yield LoopStack(emulator, server.base_url)
