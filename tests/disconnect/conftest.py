"""Disconnect tests run on both event loops: asyncio's (the rest of the suite's) and uvloop, the
loop ``switchyard serve`` runs on (``gateway.process.new_event_loop``), whose transports abort and
report lost connections their own way."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

import pytest

from gateway.process import new_event_loop


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
    return {"asyncio": asyncio.new_event_loop, "uvloop": new_event_loop}
