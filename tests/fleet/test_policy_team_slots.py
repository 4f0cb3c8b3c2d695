"""A request the policy refuses gives its team's in-flight slot back (``GATEWAY_TEAM_MAX_INFLIGHT``):
refusals by model rule or rate limit never pile up into a team locked out with nothing in flight."""

from __future__ import annotations

from typing import Any

from tests.support.fleet_stack import MESSAGE, TEAM_KEYS, FleetStack

ALPHA = TEAM_KEYS["alpha"]


def test_model_refusals_give_the_team_slot_back(fleet: Any) -> None:
    stack: FleetStack = fleet("base: {models: {deny: [opus]}}\n", GATEWAY_TEAM_MAX_INFLIGHT="3")
    for _ in range(5):
        assert stack.post(ALPHA, {**MESSAGE, "model": "claude-opus-4-5"}).status_code == 400
    answer = stack.post(ALPHA)  # nothing is in flight
    assert answer.status_code == 200, answer.text


def test_rate_limit_refusals_give_the_team_slot_back(fleet: Any) -> None:
    stack: FleetStack = fleet("base: {rate_limits: {requests_per_minute: 1}}\n", GATEWAY_TEAM_MAX_INFLIGHT="2")
    answers = [stack.post(ALPHA) for _ in range(4)]
    assert [a.status_code for a in answers] == [200, 429, 429, 429]
    assert all("in flight" not in a.text for a in answers[1:])  # the rate limit's 429 each time
