"""Two ``switchyard serve`` processes sharing one Redis agree on breaker state and session placement.

The emulators (first party as the primary, Foundry as the second upstream) run in a background
loop thread; the gateways are real subprocesses with ``GATEWAY_SESSION_STORE`` pointing at a real
redis-server (the test is skipped without one).
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import anthropic
import pytest

from emulators.upstreams import EmulatedUpstream, emulated_upstream
from tests.support.redis_server import RedisServer
from tests.support.serve_process import GatewayProcess, serve_process
from tests.support.threaded import LoopThread
from tests.upstreams.harness import CLIENT_KEY, MODEL, SYSTEM, entry

pytestmark = pytest.mark.timeout(90)
METRICS_KEY = "sk-metrics-reader"


def _metric(gateway: GatewayProcess, name: str, labels: str) -> float | None:
    """A sample of the process's ``/metrics`` (``labels`` in any order: ``a="x",b="y"``)."""
    wanted = set(labels.split(","))
    request = urllib.request.Request(gateway.base_url + "/metrics", headers={"x-api-key": METRICS_KEY})
    with urllib.request.urlopen(request, timeout=5) as response:
        text = response.read().decode()
    for line in text.splitlines():
        series, _, value = line.rpartition(" ")
        metric, _, label_text = series.partition("{")
        if metric == name and set(label_text.rstrip("}").split(",")) == wanted:
            return float(value)
    return None


def _turn(gateway: GatewayProcess, session: str | None, text: str) -> anthropic.types.Message:
    headers = {} if session is None else {"x-claude-code-session-id": session}
    client = anthropic.Anthropic(
        api_key=CLIENT_KEY, base_url=gateway.base_url, max_retries=0, default_headers=headers
    )
    return client.messages.create(
        model=MODEL, max_tokens=16, system=SYSTEM, messages=[{"role": "user", "content": text}], timeout=20
    )


def replicas_env(
    tmp_path: Path,
    upstreams: list[EmulatedUpstream],
    redis_url: str,
    sections: dict[str, Any],
    **extra: str,
) -> dict[str, str]:
    """The environment of replicas routing every model over ``upstreams`` in order (the file's
    ``sections``: breaker, failover...), sharing state in ``redis_url``."""
    path = tmp_path / "upstreams.json"
    entries = [entry(u) for u in upstreams]
    routes = [{"models": ["*"], "upstreams": [e["name"] for e in entries]}]
    path.write_text(json.dumps({"upstreams": entries, "routes": routes, **sections}))
    return {
        "GATEWAY_API_KEYS": CLIENT_KEY,
        "GATEWAY_METRICS_API_KEYS": METRICS_KEY,
        "GATEWAY_UPSTREAMS_FILE": str(path),
        "GATEWAY_SESSION_STORE": redis_url,
        "GATEWAY_MAX_RETRY_DELAY_S": "0.05",
        "GATEWAY_LOG_LEVEL": "WARNING",
        **extra,
    }


def test_two_processes_agree_on_breakers_and_placements(tmp_path: Path, redis_server: RedisServer) -> None:
    thread = LoopThread()
    try:
        primary = thread.enter(emulated_upstream("anthropic", tmp_path))
        second = thread.enter(emulated_upstream("foundry", tmp_path))
        sections = {
            "breaker": {"failures": 2, "window_s": 60, "open_s": 120, "sync_s": 0},
            "failover": {"same_upstream_retries": 1},
        }
        env = replicas_env(tmp_path, [primary, second], redis_server.url, sections)
        with (
            serve_process(env, tmp_path / "a.log") as a,
            serve_process(env, tmp_path / "b.log") as b,
        ):

            def served(upstream: EmulatedUpstream) -> int:
                return sum(1 for r in upstream.emulator.requests if r.method == "POST")

            _turn(a, "shared-session", "one")  # placed on the primary, in Redis
            assert (served(primary), served(second)) == (1, 0)
            primary.emulator.set_fault("fail_first=1000000:529,retry_after_ms=1")
            _turn(b, "shared-session", "two")  # B finds the placement, tries the primary twice, moves
            assert (served(primary), served(second)) == (3, 1)
            # B's two failures opened the primary's breaker for the fleet
            assert _metric(b, "gateway_breaker_state", 'upstream="primary"') == 2
            _turn(a, "shared-session", "three")  # A knows the session moved: straight to foundry
            _turn(a, None, "no session")  # and that the primary's breaker is open: skipped
            assert (served(primary), served(second)) == (3, 3)
            assert _metric(a, "gateway_breaker_state", 'upstream="primary"') == 2
            assert _metric(a, "gateway_upstream_selected_total", 'upstream="foundry",reason="affinity"') == 1
            assert (
                _metric(a, "gateway_upstream_selected_total", 'upstream="foundry",reason="breaker_open"') == 1
            )
            assert (
                _metric(b, "gateway_session_moves_total", 'from="primary",to="foundry",reason="status_529"')
                == 1
            )
    finally:
        thread.close()
