"""Fixtures for the loop tests: a real stack on loopback in the test's own event loop (emulator, and
a gateway in front of it: ``tests.support.loop_stack``), and the loop's two model callers for it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from emulators import EmulatorConfig, RunningEmulator, run_emulator
from gateway.app import create_app
from gateway.config import Settings
from gateway.process import running
from loop.callers import ProviderModelCaller, SdkModelCaller
from loop.deps import ModelCaller
from tests.support.loop_stack import GATEWAY_KEY, MAX_RETRIES, UPSTREAM_KEY, LoopStack


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


@pytest.fixture(params=["sdk", "provider"])
async def caller(request: pytest.FixtureRequest, stack: LoopStack) -> AsyncIterator[ModelCaller]:
    """The loop's two model callers, each against the stack: the SDK through the gateway, and the
    in-process provider caller straight to the emulator."""
    if request.param == "sdk":
        async with SdkModelCaller(stack.gateway_url, GATEWAY_KEY, max_retries=0) as sdk:
            yield sdk
    else:
        async with ProviderModelCaller.from_environ(stack.upstream_environ()) as provider:
            yield provider
