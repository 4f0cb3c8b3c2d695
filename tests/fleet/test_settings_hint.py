"""The managed-settings checksum hint (``x-claude-code-managed-settings-checksum``) on a real gateway:
each ``POST /v1/messages`` of a caller with managed settings counts as current, previous (the
group's checksum before a policy edit), stale or unknown, by group; never refused on, never logged,
never a label. The strict ``/managed/settings`` form (``x-cc-gateway-version`` + ``no-store``)."""

from __future__ import annotations

import hashlib
import logging
import re
from pathlib import Path

import pytest

from emulators import EmulatorConfig, emulator_in_thread
from gateway.app import POLICY_RELOADER_KEY, create_app
from gateway.config import Settings
from gateway.fleet.managed_settings import GATEWAY_VERSION
from gateway.fleet.settings_hint import HINT_HEADER, MAX_PER_GROUP, PREVIOUS_ACCEPTED_S, SettingsHints
from gateway.process import running
from tests.support.fleet_stack import MESSAGE, TEAM_KEYS, FleetStack
from tests.support.threaded import LoopThread

METRICS_KEY = "sk-fleet-hint-metrics"
POLICY = "groups:\n  - group: alpha\n    managed_settings: {env: {CLAUDE_CODE_GATEWAY_HINT_HEADERS: '1'}}\n"
EDITED = (
    "groups:\n  - group: alpha\n"
    "    managed_settings: {env: {CLAUDE_CODE_GATEWAY_HINT_HEADERS: '1', DISABLE_TELEMETRY: '1'}}\n"
)


def digest(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def hints(exposition: str) -> dict[tuple[str, str], float]:
    found = {}
    for group, state, value in re.findall(
        r'gateway_fleet_managed_settings_hints_total\{group="([^"]*)",state="([^"]*)"\} (\S+)', exposition
    ):
        found[(group, state)] = float(value)
    return found


def test_the_hint_is_classified_per_request_and_survives_an_edit_as_previous(
    tmp_path: Path, loop_thread: LoopThread, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    keys = tmp_path / "keys"
    keys.write_text("".join(f"{key} {team}\n" for team, key in TEAM_KEYS.items()))
    with emulator_in_thread(EmulatorConfig(api_keys=frozenset({"sk-up"}))) as emulator:
        settings = Settings.from_environ(
            {
                "GATEWAY_API_KEYS_FILE": str(keys),
                "GATEWAY_METRICS_API_KEYS": METRICS_KEY,
                "ANTHROPIC_API_KEY": "sk-up",
                "ANTHROPIC_BASE_URL": emulator.base_url,
                "GATEWAY_POLICY_FILE": str(policy),
                "GATEWAY_POLICY_RELOAD_S": "0",
            }
        )
        app = create_app(settings)
        reloader = app[POLICY_RELOADER_KEY]
        server = loop_thread.enter(running(app, "127.0.0.1", 0))
        stack = FleetStack(None, policy, server.base_url)  # type: ignore[arg-type]
        alpha = TEAM_KEYS["alpha"]
        old = digest('{"env":{"CLAUDE_CODE_GATEWAY_HINT_HEADERS":"1"}}')
        served = stack.get("/managed/settings", alpha)
        assert served.json()["checksum"] == old

        def post(key: str, value: str | None) -> int:
            extra = {} if value is None else {HINT_HEADER: value}
            import requests

            return requests.post(
                stack.url + "/v1/messages", json=MESSAGE, headers={"x-api-key": key, **extra}, timeout=10
            ).status_code

        assert post(alpha, old) == 200
        assert post(alpha, None) == 200
        assert post(alpha, "sha256:" + "0" * 64) == 200  # stale: counted, never refused
        assert post(TEAM_KEYS["beta"], None) == 200  # no managed settings, nothing sent: not counted
        assert post(TEAM_KEYS["beta"], old) == 200  # no settings apply, a value sent: stale
        stack.write_policy(EDITED)
        assert reloader.check()
        new = digest('{"env":{"CLAUDE_CODE_GATEWAY_HINT_HEADERS":"1","DISABLE_TELEMETRY":"1"}}')
        assert post(alpha, old) == 200  # the edit is new: the previous checksum is still accepted
        assert post(alpha, new) == 200
        exposition = stack.get("/metrics", METRICS_KEY).text
    counted = hints(exposition)
    assert counted[("alpha", "current")] == 2
    assert counted[("alpha", "previous")] == 1
    assert counted[("alpha", "stale")] == 1
    assert counted[("alpha", "unknown")] == 1
    assert counted[("beta", "stale")] == 1 and counted[("beta", "unknown")] == 0
    assert old not in exposition and new not in exposition  # never a label
    logged = caplog.text + "".join(str(record.__dict__) for record in caplog.records)
    assert old not in logged and new not in logged  # sensitive: never logged
    sent = [r.header(HINT_HEADER) for r in emulator.requests if r.path.startswith("/v1/messages")]
    assert len(sent) == 7  # all of them went upstream


def test_previous_checksums_expire_and_the_history_is_bounded() -> None:
    hints = SettingsHints(None)
    hints.saw_current("eng", "sha256:a")
    assert hints.state("eng", "sha256:a", "sha256:a", 0.0) == "current"
    assert hints.state("eng", "sha256:b", "sha256:a", 10.0) == "stale"  # still current elsewhere
    hints.policy_changed(100.0)
    hints.saw_current("eng", "sha256:b")
    assert hints.state("eng", "sha256:b", "sha256:a", 100.0 + PREVIOUS_ACCEPTED_S) == "previous"
    assert hints.state("eng", "sha256:b", "sha256:a", 101.0 + PREVIOUS_ACCEPTED_S) == "stale"
    assert hints.state("ops", "sha256:b", "sha256:a", 101.0) == "stale"  # another group's history
    assert hints.state("eng", "sha256:b", None, 101.0) == "unknown"
    hints.policy_changed(200.0)  # an edit that did not change eng's settings
    hints.saw_current("eng", "sha256:b")  # seen again: current, not previous
    assert hints.state("eng", "sha256:c", "sha256:b", 200.0) == "stale"
    for index in range(3 * MAX_PER_GROUP):
        hints.saw_current("eng", f"sha256:{index}")
    hints.policy_changed(300.0)
    assert hints.state("eng", "x", f"sha256:{3 * MAX_PER_GROUP - 1}", 300.0) == "previous"
    assert hints.state("eng", "x", "sha256:0", 300.0) == "stale"  # forgotten: the history is bounded


def test_managed_settings_answers_are_in_the_strict_form(fleet: object) -> None:
    stack: FleetStack = fleet(POLICY)  # type: ignore[operator]
    alpha = TEAM_KEYS["alpha"]
    ok = stack.get("/managed/settings", alpha)
    checksum = ok.json()["checksum"]
    cached = stack.get("/managed/settings", alpha, **{"If-None-Match": f'"{checksum}"'})
    missing = stack.get("/managed/settings", TEAM_KEYS["beta"])
    probe = stack.get("/managed/settings", alpha, **{"If-None-Match": "*"})  # Desktop: as without it
    assert (ok.status_code, cached.status_code, missing.status_code, probe.status_code) == (
        200,
        304,
        404,
        200,
    )
    for answer in (ok, cached, missing, probe):
        assert answer.headers["x-cc-gateway-version"] == GATEWAY_VERSION
        assert answer.headers["cache-control"] == "no-store"
    assert GATEWAY_VERSION.startswith("switchyard/") and len(GATEWAY_VERSION) > len("switchyard/")
    assert cached.headers["etag"] == f'"{checksum}"' and not cached.content
    assert missing.json()["error"]["type"] == "not_found_error"
    assert stack.get("/managed/settings", "sk-nobody").status_code == 401
