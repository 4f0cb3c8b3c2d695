"""Fixtures for the cache-aware pipeline tests; their helpers (Claude Code turns, a gateway and an
emulator on one manual clock) are in ``tests.support.cache_turns`` and ``tests.support.cache_stack``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.redis_server import RedisServer, running_redis


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    with running_redis() as server:
        yield server
