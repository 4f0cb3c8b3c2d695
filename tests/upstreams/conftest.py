"""Fixtures shared by the several-upstreams tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.redis_server import RedisServer, running_redis


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A real ``redis-server`` on loopback for this test (skips without the binary)."""
    with running_redis(tmp_path) as server:
        yield server
