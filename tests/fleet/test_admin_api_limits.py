"""The admin API's spend limits on a real gateway: what a cap may be, and that every cap it accepts
and lists is the one enforced."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import requests

from gateway.fleet.periods import Period
from gateway.fleet.policy_reload import parse_cap_field
from gateway.fleet.spend_caps import micros
from tests.support.fleet_stack import ADMIN_KEY, TEAM_KEYS, FleetStack
from tests.support.gateway_stack import start_stack
from tests.support.threaded import LoopThread

BETA = TEAM_KEYS["beta"]
LIMITS = "/v1/organizations/spend_limits"


def put(stack: FleetStack, change: dict[str, Any]) -> requests.Response:
    return requests.put(stack.url + LIMITS, json=change, headers={"x-api-key": ADMIN_KEY}, timeout=10)


@pytest.mark.parametrize(
    ("limit", "message"),
    [
        (1e303, "limit_usd: Input should be less than or equal to 1000000000"),
        (True, "limit_usd: Input should be a valid number"),
        ("5", "limit_usd: Input should be a valid number"),
        (-1, "limit_usd: Input should be greater than or equal to 0"),
    ],
)
def test_a_cap_out_of_range_or_not_a_number_is_refused(fleet: Any, limit: Any, message: str) -> None:
    stack: FleetStack = fleet("base: {}\n")
    answer = put(stack, {"scope": "org", "period": "daily", "limit_usd": limit})
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"] == {"type": "invalid_request_error", "message": message}
    assert stack.post(BETA).status_code == 200
    listing = stack.get(LIMITS, ADMIN_KEY)
    assert listing.status_code == 200 and listing.json()["data"] == []


def test_the_largest_cap_is_enforced_and_listed(fleet: Any) -> None:
    stack: FleetStack = fleet("base: {}\n")
    assert put(stack, {"scope": "org", "period": "daily", "limit_usd": 1e9}).status_code == 200
    assert stack.post(BETA).status_code == 200
    assert stack.get(LIMITS, ADMIN_KEY).json()["data"][0]["limit_usd"] == 1e9


def test_micros_never_overflows_and_shared_caps_are_bounded() -> None:
    assert micros(1e303) == 2**53 == micros(float("inf"))
    assert micros(float("-inf")) == -(2**53) and micros(float("nan")) == 0
    assert micros(1e9) == 10**15 and micros(0.000001) == 1
    # a cap another replica (or an older version) shared in Redis out of range is ignored
    for value in ("inf", "nan", "1e303", "-1"):
        assert parse_cap_field("org daily ", value) is None
    assert parse_cap_field("org daily ", "25.0") == ("org", "", Period.DAILY, 25.0)


def test_the_base_cap_set_through_the_api_is_enforced(fleet: Any) -> None:
    stack: FleetStack = fleet(
        "base: {spend_caps: {daily_usd: 40}}\n"
        "users: [{user: 'key:gamma', spend_caps: {daily_usd: 40}}]\n"
    )
    put_base = put(stack, {"scope": "user", "owner": "*", "period": "daily", "limit_usd": 0.000001})
    assert put_base.status_code == 200 and put_base.json()["previous_usd"] == 40.0
    rows = stack.get(LIMITS, ADMIN_KEY).json()["data"]
    assert {"owner": "*", "period": "daily", "limit_usd": 1e-06, "source": "admin"}.items() <= next(
        row for row in rows if row["owner"] == "*").items()
    assert stack.post(BETA).status_code == 200
    assert stack.post(BETA).status_code == 429  # the base's cap, as listed
    assert stack.post(TEAM_KEYS["gamma"]).status_code == 200  # a user entry's own cap is laid over it
    # null removes the base's daily cap: nothing caps beta's day any more
    assert put(stack, {"scope": "user", "owner": "*", "period": "daily", "limit_usd": None}).status_code == 200
    assert stack.post(BETA).status_code == 200


def test_without_a_policy_file_a_cap_is_refused_not_ignored(tmp_path: Path, loop_thread: LoopThread) -> None:
    keys = tmp_path / "keys"
    keys.write_text(f"{BETA} beta\n{ADMIN_KEY} ops role=admin\n")
    gateway = start_stack(loop_thread, GATEWAY_API_KEYS_FILE=str(keys))
    stack = FleetStack(gateway, tmp_path / "no-policy.yaml", f"http://127.0.0.1:{gateway.port}")
    change = {"scope": "user", "owner": "key:beta", "period": "daily", "limit_usd": 0.000001}
    answer = put(stack, change)
    assert answer.status_code == 409 and answer.headers["x-should-retry"] == "false"
    assert answer.json()["error"] == {
        "type": "conflict_error",
        "message": "no policy file: spend caps are not enforced (set GATEWAY_POLICY_FILE)",
    }
    assert stack.get(LIMITS, ADMIN_KEY).json()["data"] == []
    assert [stack.post(BETA).status_code for _ in range(2)] == [200, 200]
    usage = stack.get("/api/oauth/usage", BETA).json()  # no cap claimed
    assert usage["limits"] == [] and usage["extra_usage"]["monthly_limit"] is None
