"""Shared fixtures: a clean environment, and helpers to run gateways against upstreams."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

from gateway.logging_setup import install_writer
from tests.support.log_lines import LogLines
from tests.support.threaded import LoopThread

# property tests check results, never speed: no per-example deadline nor "too slow" health check (a
# loaded 2-core CI machine turned slow examples into spurious failures of tests/unit/test_sse.py)
settings.register_profile("switchyard", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("switchyard")

# the end-of-run line listing the tests skipped for a missing system binary (kubectl, redis-server...)
pytest_plugins = ("tests.support.binaries",)

_AMBIENT_PREFIXES = ("ANTHROPIC_", "AWS_", "GOOGLE_", "CLOUD_ML_", "GATEWAY_", "CLAUDE_CODE_")
_AMBIENT_NAMES = (
    "HTTPS_PROXY",
    "HTTP_PROXY",
    "NO_PROXY",
    "https_proxy",
    "http_proxy",
    "no_proxy",
    "SSL_CERT_FILE",
    "ALL_PROXY",
    "all_proxy",
)


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test sees the developer's or CI's provider credentials, proxies or gateway settings."""
    for name in list(os.environ):
        if name.startswith(_AMBIENT_PREFIXES) or name in _AMBIENT_NAMES:
            monkeypatch.delenv(name, raising=False)


@pytest.fixture(autouse=True)
def log_lines() -> Iterator[LogLines]:
    """The gateway's log lines during the test, in memory (none reach the test process's stderr)."""
    lines = LogLines()
    previous = install_writer(lines.writer)
    try:
        yield lines
    finally:
        install_writer(previous)
        lines.writer.close(5)


@pytest.fixture
def loop_thread() -> Iterator[LoopThread]:
    thread = LoopThread()
    try:
        yield thread
    finally:
        thread.close()
