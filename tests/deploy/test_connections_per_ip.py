"""``GATEWAY_MAX_CONNECTIONS_PER_IP`` in a real ``python -m gateway serve`` process: a slowloris from
one address (127.0.0.2) holds at most its cap, its own oldest connections are shed (JSON ``503``),
clients from another address (127.0.0.1, the anthropic SDK) are served as usual, and the address
never appears in the logs or the metrics."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from emulators import EmulatorConfig, RunningEmulator
from emulators.runner import emulator_in_thread
from tests.deploy.test_slow_clients import (
    LEGIT_BOUND_S,
    METRICS_KEY,
    UPSTREAM_KEY,
    Slowloris,
    _ask,
    _environ,
    _metric,
)
from tests.support.serve_process import serve_process

ATTACKER = "127.0.0.2"  # loopback too on Linux; the SDK client connects from 127.0.0.1
PER_IP = 20
ATTACK = 200


@pytest.fixture(scope="module")
def emulator() -> Iterator[RunningEmulator]:
    with emulator_in_thread(EmulatorConfig(api_keys=frozenset({UPSTREAM_KEY}))) as emu:
        yield emu


def test_one_address_holds_at_most_its_cap_and_others_are_served(
    emulator: RunningEmulator, tmp_path: Path
) -> None:
    # header timeouts far above the test's length: only the per-address cap closes the attackers
    env = _environ(
        emulator,
        GATEWAY_HEADER_TIMEOUT_S="120",
        GATEWAY_BODY_TIMEOUT_S="120",
        GATEWAY_MAX_CONNECTIONS_PER_IP=str(PER_IP),
    )
    with serve_process(env, tmp_path / "gateway.err") as gateway:
        _ask(gateway)  # warm: the provider's pool, imports
        with Slowloris(gateway.port, ATTACK, source=ATTACKER) as attack:
            deadline = time.monotonic() + 10
            while attack.closed < ATTACK - PER_IP:  # the trickle rounds collect the shed sockets
                assert time.monotonic() < deadline, attack.closed
                time.sleep(0.05)
            latencies = [_ask(gateway) for _ in range(5)]
            incomplete = _metric(gateway, "gateway_connections_open", '{state="incomplete"}')
            per_ip_shed = _metric(
                gateway, "gateway_connections_closed_total", '{reason="ip_shed_incomplete"}'
            )
            global_shed = _metric(gateway, "gateway_connections_closed_total", '{reason="shed_incomplete"}')
            limit = _metric(gateway, "gateway_connections_limit", '{kind="per_ip"}')
            still_open = len(attack.sockets)
        status, exposition = gateway.get("/metrics", {"x-api-key": METRICS_KEY})
        assert gateway.process.poll() is None
        stderr = gateway.stderr()

    assert max(latencies) < LEGIT_BOUND_S, latencies
    assert limit == PER_IP and incomplete <= PER_IP and still_open == PER_IP
    assert (per_ip_shed, global_shed) == (ATTACK - PER_IP, 0)
    assert attack.closed == ATTACK - PER_IP and len(attack.answers) == attack.closed
    for answer in attack.answers:  # every shed attacker was told why, in the Anthropic shape
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 503 ") and b"retry-after: 1" in head.lower()
        error = orjson.loads(body)["error"]
        assert error["type"] == "overloaded_error" and "GATEWAY_MAX_CONNECTIONS_PER_IP" in error["message"]
    assert status == 200 and ATTACKER.encode() not in exposition
    assert "Traceback" not in stderr and ATTACKER not in stderr
    warnings = [line for line in stderr.splitlines() if "GATEWAY_MAX_CONNECTIONS_PER_IP" in line]
    assert 1 <= len(warnings) <= 2, warnings  # rate-limited: not one line per connection
