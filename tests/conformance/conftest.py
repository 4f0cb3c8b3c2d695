"""Fixtures for the conformance tests: one gateway per provider in front of that provider's
emulator (``tests.support.provider_stack``), the same client code against all four.

Every test here runs on a virtual-time event loop (``tests.support.virtual_time``): the fault
matrix's 0.05-0.3 s watchdogs fire when the emulator stalls on purpose, never because the test
process was paused (a garbage collection, a loaded machine) while an answer was on its way.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import pytest

from tests.support.provider_stack import PROVIDERS, ProviderStack, provider_stack
from tests.support.virtual_time import VirtualTimeLoop


@pytest.fixture(params=PROVIDERS)
async def stack(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[ProviderStack]:
    async with provider_stack(request.param, tmp_path, monkeypatch, GATEWAY_MAX_RETRIES="0") as built:
        yield built


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, type[VirtualTimeLoop]]:
    return {"virtual_time": VirtualTimeLoop}


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    from tests.conformance.test_fault_matrix import summary

    for line in summary():
        terminalreporter.write_line(line)
