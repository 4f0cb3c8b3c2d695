"""The policy on a real gateway in front of the emulator, through the anthropic SDK and raw HTTP:
model rules, spend caps with their headers and 429, rate limits, the usage endpoint, the admin API,
managed settings, reloads and the audit log."""

from __future__ import annotations

import json
import logging
import os
import signal
import time
from pathlib import Path
from typing import Any

import anthropic
import pytest

from emulators import EmulatorConfig, emulator_in_thread
from gateway.app import POLICY_RELOADER_KEY, create_app
from gateway.config import Settings
from gateway.pricing import DEFAULT_TABLE
from gateway.process import running
from gateway.streaming.usage import Usage
from tests.support.fleet_stack import ADMIN_KEY, MESSAGE, TEAM_KEYS, FleetStack
from tests.support.gateway_stack import CLIENT_KEY
from tests.support.serve_process import serve_process
from tests.support.threaded import LoopThread

U = "anthropic-ratelimit-unified-"


@pytest.fixture(autouse=True)
def audit_level(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="switchyard.audit")


def audit(caplog: pytest.LogCaptureFixture, event: str) -> list[dict[str, Any]]:
    found = []
    for record in caplog.records:
        if record.name == "switchyard.audit":
            entry = json.loads(record.getMessage())
            if entry["event"] == event:
                found.append(entry)
    return found


def test_denied_and_killed_models_are_refused_naming_the_model(
    fleet: Any, caplog: pytest.LogCaptureFixture
) -> None:
    metrics_key = "sk-fleet-metrics-5d2e"
    stack: FleetStack = fleet(
        "kill_switch: [haiku]\nbase: {models: {deny: [opus]}}\n", GATEWAY_METRICS_API_KEYS=metrics_key
    )
    client = stack.client()
    with pytest.raises(anthropic.BadRequestError) as raised:
        client.messages.create(**{**MESSAGE, "model": "claude-opus-4-5-20251101"})
    assert raised.value.status_code == 400
    assert "'claude-opus-4-5-20251101'" in raised.value.message and "policy" in raised.value.message
    with pytest.raises(anthropic.BadRequestError) as killed:
        client.messages.count_tokens(model="claude-haiku-4-5", messages=MESSAGE["messages"])
    assert "haiku models are switched off" in killed.value.message
    assert stack.stack.upstream_count == 0  # refused before proxying
    assert client.messages.create(**MESSAGE).content
    ids = [model.id for model in client.models.list()]
    assert ids and not any("opus" in i or "haiku" in i for i in ids) and any("sonnet" in i for i in ids)
    refusals = audit(caplog, "policy.refused")
    assert [r["reason"] for r in refusals] == ["model", "model"]
    assert refusals[0]["subject"] == "key:default" and refusals[0]["model"] == "claude-opus-4-5-20251101"
    exposition = stack.get("/metrics", key=metrics_key).text  # the Fleet dashboard's refusals panel
    assert 'gateway_fleet_refusals_total{reason="model_denied"} 2.0' in exposition


def cost_of(usage: Any, model: str = "claude-sonnet-4-5") -> float:
    return DEFAULT_TABLE.cost("anthropic", model, Usage(usage.input_tokens, usage.output_tokens)).total


def test_a_user_crosses_75_and_95_percent_then_gets_the_429(
    fleet: Any, caplog: pytest.LogCaptureFixture
) -> None:
    probe = fleet("base: {}\n")
    first = probe.client().messages.create(**MESSAGE)
    cost_micros = round(cost_of(first.usage) * 1e6)
    cap = cost_micros * 10.5 / 1e6  # 8 requests: 76 %, 10: 95.2 %, 11: over
    stack: FleetStack = fleet(f"users: [{{user: 'key:alpha', spend_caps: {{daily_usd: {cap!r}}}}}]\n")
    key = TEAM_KEYS["alpha"]
    seen = []
    for _ in range(11):
        response = stack.post(key)
        assert response.status_code == 200, response.text
        assert not any(
            h.lower().startswith("anthropic-ratelimit-") and not h.lower().startswith(U)
            for h in response.headers
        )
        seen.append(
            (
                response.headers[U + "status"],
                response.headers[U + "overage-utilization"],
                response.headers.get(U + "overage-surpassed-threshold"),
            )
        )
        assert response.headers[U + "representative-claim"] == "overage"
        assert response.headers[U + "overage-status"] == response.headers[U + "status"]
    assert seen[0] == ("allowed", "0", None)
    assert seen[7] == ("allowed", "0.67", None)
    assert seen[8] == ("allowed_warning", "0.76", "0.75")
    assert seen[10] == ("allowed_warning", "0.95", "0.95")
    refused = stack.post(key)
    headers = refused.headers
    assert refused.status_code == 429 and refused.json()["error"]["type"] == "billing_error"
    tomorrow = (int(time.time()) // 86_400 + 1) * 86_400
    assert abs(int(headers["retry-after"]) - (tomorrow - time.time())) <= 5
    assert headers[U + "reset"] == headers[U + "overage-reset"] == str(tomorrow)
    assert headers["x-should-retry"] == "false" and headers[U + "status"] == "rejected"
    assert headers[U + "overage-period"] == "daily" and headers[U + "overage-utilization"] == "1"
    assert U + "representative-claim" not in headers and U + "overage-status" not in headers
    assert "resets" in refused.json()["error"]["message"]
    # another user is not capped: no usage headers, the upstream's own rate-limit headers kept
    other = stack.post(TEAM_KEYS["beta"])
    assert other.status_code == 200 and U + "status" not in other.headers
    assert "anthropic-ratelimit-requests-limit" in other.headers
    # the usage endpoint agrees, and the spend is exactly 11 requests at the price table
    usage = stack.get("/api/oauth/usage", key)
    assert usage.headers["cache-control"] == "no-store"
    body = usage.json()
    assert body["limits"][0]["severity"] == "critical" and body["limits"][0]["is_active"] is True
    assert body["extra_usage"]["used_credits"] == (11 * cost_micros) // 10_000
    assert body["limits"][0]["resets_at"] == time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(tomorrow))
    mine = stack.get("/api/oauth/usage", TEAM_KEYS["beta"]).json()
    assert mine["limits"] == [] and mine["extra_usage"]["daily"]["used_credits"] == cost_micros // 10_000
    assert [r["reason"] for r in audit(caplog, "policy.refused")] == ["spend_cap"]


def test_cache_writes_are_priced_at_their_ttl(fleet: Any) -> None:
    stack: FleetStack = fleet("users: [{user: 'key:gamma', spend_caps: {monthly_usd: 1000}}]\n")
    long_text = "the same long system prompt " * 400
    body = {
        **MESSAGE,
        "system": [{"type": "text", "text": long_text, "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
    }
    response = stack.post(TEAM_KEYS["gamma"], body)
    assert response.status_code == 200, response.text
    reported = response.json()["usage"]
    written_1h = reported["cache_creation"]["ephemeral_1h_input_tokens"]
    assert written_1h > 0
    usage = Usage(reported["input_tokens"], reported["output_tokens"], cache_write_1h_tokens=written_1h)
    expected = DEFAULT_TABLE.cost("anthropic", "claude-sonnet-4-5", usage).total
    limits = stack.get("/v1/organizations/spend_limits", ADMIN_KEY).json()["data"]
    (row,) = [row for row in limits if row["owner"] == "key:gamma"]
    assert row["spent_usd"] == pytest.approx(expected, abs=1e-6)
    # Sonnet 4.5: $3 in, $15 out, 1h cache writes at 2x input
    assert expected == pytest.approx(
        (usage.input_tokens * 3 + usage.output_tokens * 15 + written_1h * 6) / 1e6
    )


def test_rate_limits_per_user_and_streams(fleet: Any, caplog: pytest.LogCaptureFixture) -> None:
    stack: FleetStack = fleet(
        "groups: [{group: beta, rate_limits: {requests_per_minute: 2, concurrent_streams: 0}}]\n"
    )
    key = TEAM_KEYS["beta"]
    assert stack.post(key).status_code == 200  # a burst of one, then one every 30 s
    refused = stack.post(key)
    assert refused.status_code == 429 and refused.json()["error"]["type"] == "rate_limit_error"
    assert 29 <= int(refused.headers["retry-after"]) <= 30
    assert "2 requests per minute" in refused.json()["error"]["message"]
    assert stack.post(TEAM_KEYS["alpha"]).status_code == 200  # not in the group
    streams: FleetStack = fleet("base: {rate_limits: {concurrent_streams: 0}}\n")
    with pytest.raises(anthropic.RateLimitError) as raised:
        streams.client().messages.create(**MESSAGE, stream=True)
    assert "concurrent streams" in raised.value.message
    assert streams.post(CLIENT_KEY).status_code == 200  # not a stream
    assert {r["kind"] for r in audit(caplog, "policy.refused")} == {"requests", "streams"}


def test_managed_settings_checksum_etag_and_404(fleet: Any) -> None:
    stack: FleetStack = fleet(
        "groups:\n"
        "  - group: alpha\n"
        "    managed_settings: {zeta: {b: 1, a: [{y: 2, x: 'ünïcödé ✓'}]}, env: {K: '1'}}\n"
        "  - group: beta\n"
        "    managed_settings: {}\n"
    )
    import hashlib

    expected = '{"env":{"K":"1"},"zeta":{"a":[{"x":"ünïcödé ✓","y":2}],"b":1}}'
    digest = "sha256:" + hashlib.sha256(expected.encode()).hexdigest()
    answer = stack.get("/managed/settings", TEAM_KEYS["alpha"])
    assert answer.status_code == 200
    body = answer.json()
    assert body["checksum"] == digest and answer.headers["etag"] == f'"{digest}"'
    assert body["settings"] == {"zeta": {"b": 1, "a": [{"y": 2, "x": "ünïcödé ✓"}]}, "env": {"K": "1"}}
    assert isinstance(body["uuid"], str) and len(body["uuid"]) == 36
    assert (
        stack.get("/managed/settings", TEAM_KEYS["alpha"], **{"If-None-Match": f'"{digest}"'}).status_code
        == 304
    )
    assert (
        stack.get("/managed/settings", TEAM_KEYS["alpha"], **{"If-None-Match": '"sha256:0"'}).status_code
        == 200
    )
    assert stack.get("/managed/settings", TEAM_KEYS["alpha"], **{"If-None-Match": "*"}).status_code == 200
    empty = stack.get("/managed/settings", TEAM_KEYS["beta"])
    assert empty.status_code == 200 and empty.json()["settings"] == {}
    assert empty.json()["checksum"] == "sha256:" + hashlib.sha256(b"{}").hexdigest()
    missing = stack.get("/managed/settings", TEAM_KEYS["gamma"])
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "not_found_error"
    assert stack.get("/managed/settings", "sk-nobody").status_code == 401


def test_reload_on_change_keeps_the_old_policy_when_bad(
    tmp_path: Path, loop_thread: LoopThread, caplog: pytest.LogCaptureFixture
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("base: {models: {deny: [opus]}}\n")
    with emulator_in_thread(EmulatorConfig(api_keys=frozenset({"sk-up"}))) as emulator:
        settings = Settings.from_environ(
            {
                "GATEWAY_API_KEYS": CLIENT_KEY,
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
        opus = {**MESSAGE, "model": "claude-opus-4-5"}
        assert stack.post(CLIENT_KEY, opus).status_code == 400
        stack.write_policy("base: {models: {deny: [sonnet]}}\n")
        assert reloader.check()  # the poll sees the change
        assert stack.post(CLIENT_KEY, opus).status_code == 200
        assert stack.post(CLIENT_KEY).status_code == 400
        stack.write_policy("base: {models: {deny: 5}}\n")
        assert not reloader.check()
        assert not reloader.check()  # reported once per file version
        assert stack.post(CLIENT_KEY).status_code == 400  # the previous policy stays
        (failed,) = audit(caplog, "policy.reload_failed")
        assert "base.models.deny" in failed["problem"] and failed["trigger"] == "file change"
        assert [e["trigger"] for e in audit(caplog, "policy.reloaded")] == ["file change"]


def test_managed_settings_that_are_not_json_are_refused_at_reload(fleet: Any) -> None:
    stack: FleetStack = fleet("base: {managed_settings: {env: {ROLLOUT: '2026-01-15'}}}\n")
    reloader = stack.stack.gateway.runner.app[POLICY_RELOADER_KEY]
    stack.write_policy("base: {managed_settings: {env: {ROLLOUT: 2026-01-15}}}\n")  # a YAML date
    assert not reloader.check()
    assert stack.post(TEAM_KEYS["beta"]).status_code == 200  # the policy in force stays
    answer = stack.get("/managed/settings", TEAM_KEYS["beta"])
    assert answer.status_code == 200 and answer.json()["settings"] == {"env": {"ROLLOUT": "2026-01-15"}}


def test_sighup_reloads_a_serving_process(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("base: {models: {deny: [opus]}}\n")
    opus = {**MESSAGE, "model": "claude-opus-4-5"}
    with emulator_in_thread(EmulatorConfig(api_keys=frozenset({"sk-up"}))) as emulator:
        env = {
            "GATEWAY_API_KEYS": CLIENT_KEY,
            "ANTHROPIC_API_KEY": "sk-up",
            "ANTHROPIC_BASE_URL": emulator.base_url,
            "GATEWAY_POLICY_FILE": str(policy),
            "GATEWAY_POLICY_RELOAD_S": "0",  # no polling: only the signal can reload
        }
        with serve_process(env, tmp_path / "gateway.log") as gateway:
            stack = FleetStack(None, policy, gateway.base_url)  # type: ignore[arg-type]
            assert stack.post(CLIENT_KEY, opus).status_code == 400
            stack.write_policy("base: {models: {deny: [haiku]}}\n")
            assert stack.post(CLIENT_KEY, opus).status_code == 400  # not yet: no SIGHUP
            os.kill(gateway.process.pid, signal.SIGHUP)
            deadline = time.monotonic() + 10
            while stack.post(CLIENT_KEY, opus).status_code != 200:
                assert time.monotonic() < deadline, gateway.stderr()[-2000:]
                time.sleep(0.05)

            def reload_lines() -> list[dict[str, Any]]:
                lines = [json.loads(line) for line in gateway.stderr().splitlines() if line.startswith("{")]
                return [
                    json.loads(line["message"])
                    for line in lines
                    if line.get("logger") == "switchyard.audit" and "policy.reloaded" in line["message"]
                ]

            while not reload_lines():  # the log writer thread may lag the answer a little
                assert time.monotonic() < deadline
                time.sleep(0.05)
            assert reload_lines()[0]["trigger"] == "SIGHUP"


def test_admin_api_reads_and_sets_caps(fleet: Any, caplog: pytest.LogCaptureFixture) -> None:
    stack: FleetStack = fleet("admin_groups: [gamma]\norganization: {spend_caps: {monthly_usd: 500}}\n")
    assert stack.get("/v1/organizations/spend_limits", TEAM_KEYS["alpha"]).status_code == 403
    assert stack.get("/v1/organizations/spend_limits", "sk-nobody").status_code == 401
    listing = stack.get("/v1/organizations/spend_limits", ADMIN_KEY).json()["data"]
    assert listing == [
        {
            "scope": "org",
            "owner": "",
            "period": "monthly",
            "limit_usd": 500,
            "source": "file",
            "spent_usd": 0.0,
        }
    ]
    import requests

    change = {"scope": "user", "owner": "key:alpha", "period": "daily", "limit_usd": 0}
    put = requests.put(
        stack.url + "/v1/organizations/spend_limits",
        json=change,
        headers={"x-api-key": TEAM_KEYS["gamma"]},
        timeout=10,
    )
    assert put.status_code == 200 and put.json()["previous_usd"] is None
    refused = stack.post(TEAM_KEYS["alpha"])
    assert refused.status_code == 429 and refused.headers[U + "overage-period"] == "daily"
    bad = requests.put(
        stack.url + "/v1/organizations/spend_limits",
        json={**change, "period": "hourly"},
        headers={"x-api-key": ADMIN_KEY},
        timeout=10,
    )
    assert bad.status_code == 400 and bad.json()["error"]["message"].startswith("period:")
    (changed,) = audit(caplog, "policy.cap_changed")
    assert changed == {
        "event": "policy.cap_changed",
        "actor": "key:gamma",
        "scope": "user",
        "owner": "key:alpha",
        "period": "daily",
        "old_usd": None,
        "new_usd": 0.0,
    }
    # an admin key may use nothing else
    assert stack.post(ADMIN_KEY).status_code == 403


def test_a_capped_stream_carries_the_usage_headers_instead_of_the_upstreams(fleet: Any) -> None:
    stack: FleetStack = fleet("base: {spend_caps: {monthly_usd: 100}}\n")
    with stack.client().messages.with_streaming_response.create(**MESSAGE, stream=True) as response:
        headers = response.headers
        assert "".join(response.iter_text())
    assert headers[U + "status"] == "allowed" and headers[U + "representative-claim"] == "overage"
    assert not [
        h for h in headers if h.lower().startswith("anthropic-ratelimit-") and not h.lower().startswith(U)
    ]
