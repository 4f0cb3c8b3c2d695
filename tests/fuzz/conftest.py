"""One gateway in front of the emulator for the whole fuzz suite, and a checker per test.

The gateway runs with every path that touches client data switched on: request bodies in the
access log (``GATEWAY_LOG_BODIES=1``), automatic cache breakpoints, sessions (cases send session
ids), a keys file with teams. Retries are off so that one case is one upstream request at most.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Iterator

import pytest

from tests.fuzz.harness import TEAM_KEY, Checker
from tests.support.gateway_stack import GatewayStack, start_stack
from tests.support.log_lines import LogLines
from tests.support.threaded import LoopThread


@pytest.fixture(scope="session")
def fuzz_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayStack]:
    keys = tmp_path_factory.mktemp("fuzz-keys") / "keys"
    keys.write_text(f"{TEAM_KEY} fuzz-team\n")
    thread = LoopThread()
    try:
        yield start_stack(
            thread,
            GATEWAY_API_KEYS_FILE=str(keys),
            GATEWAY_LOG_BODIES="1",
            GATEWAY_AUTO_CACHE="1",
            GATEWAY_MAX_RETRIES="0",
            GATEWAY_MAX_BODY_BYTES=str(4 * 1024 * 1024),
        )
    finally:
        thread.close()


@pytest.fixture
def checker(
    fuzz_stack: GatewayStack, log_lines: LogLines, caplog: pytest.LogCaptureFixture
) -> Iterator[Checker]:
    caplog.set_level(logging.INFO, logger="switchyard.access")
    # Cyclic garbage left by earlier tests (an SDK client a test did not close) is collected here,
    # on a thread with no running loop, where its finalizer does nothing: collected later on the
    # gateway's loop thread, it would schedule an ``aclose`` there that fails ("Event loop is
    # closed") and logs a traceback this test would take for the gateway's.
    gc.collect()
    yield Checker(fuzz_stack, log_lines, caplog)
