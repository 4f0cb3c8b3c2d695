"""The request path's caches never answer with a stale entry: the policy gate's per-principal plans
(a reloaded policy or an admin-set cap applies to the very next request, a new UTC day counts on
today's counters, a principal whose groups changed is a new principal), their kept usage-limit
headers, and the bounds of both. The bearer cache's own checks (revocation, expiry) are in
``tests/fleet_signin/test_token_cache.py``."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from gateway.errors import ClientInputError, GatewayError
from gateway.fleet import policy_gate
from gateway.fleet.counters import MemoryCounters
from gateway.fleet.periods import Period
from gateway.fleet.policy import Policy
from gateway.fleet.policy_file import parse_policy
from gateway.fleet.policy_gate import PolicyGate
from gateway.fleet.policy_reload import PolicyHolder
from gateway.fleet.principal import Principal, Source
from gateway.providers.base import ClientRequest
from gateway.streaming.usage import Usage
from tests.support.fleet_stack import messages_request

U = "anthropic-ratelimit-unified-"
NOON = datetime(2026, 12, 2, 12, tzinfo=UTC).timestamp()
SONNET, OPUS = "claude-sonnet-4-5", "claude-opus-4-1"


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def policy(text: str) -> Policy:
    return Policy(parse_policy(text, "test.yaml"), source="test.yaml")




def user(name: str = "ann", groups: tuple[str, ...] = ("eng",)) -> Principal:
    return Principal(f"idp|{name}", f"{name}@example.com", groups, f"{name}@example.com", Source.TOKEN)


def gate_for(text: str, clock: Clock) -> tuple[PolicyGate, PolicyHolder]:
    holder = PolicyHolder(policy(text))
    return PolicyGate(holder, MemoryCounters(), clock=clock), holder


def admitted(gate: PolicyGate, who: Principal, client: ClientRequest | None = None) -> dict[str, str]:
    """Admit one request, charge it nothing; its usage-limit headers."""
    admission = asyncio.run(gate.admit(who, client or messages_request(), "r"))
    assert admission is not None
    gate.record(admission, 0.0, Usage(1, 1))
    return dict(admission.headers)


def spend(gate: PolicyGate, who: Principal, usd: float) -> None:
    admission = asyncio.run(gate.admit(who, messages_request(), "spend"))
    assert admission is not None
    gate.record(admission, usd, Usage(1, 1))


def test_a_reloaded_policy_applies_to_the_next_request() -> None:
    clock = Clock(NOON)
    gate, holder = gate_for("base: {models: {allow: [sonnet]}, spend_caps: {daily_usd: 10}}\n", clock)
    ann = user()
    spend(gate, ann, 7.6)  # 76 % of $10: past the 75 % threshold
    first = admitted(gate, ann)
    assert first[U + "overage-utilization"] == "0.76" and first[U + "status"] == "allowed_warning"
    with pytest.raises(ClientInputError):
        admitted(gate, ann, messages_request(OPUS))
    holder.install(policy("base: {models: {allow: [sonnet, opus]}, spend_caps: {daily_usd: 100}}\n"))
    after = admitted(gate, ann)  # the same principal object: its kept plan must not answer
    assert after[U + "overage-utilization"] == "0.08" and after[U + "status"] == "allowed"
    assert admitted(gate, ann, messages_request(OPUS))[U + "status"] == "allowed"
    holder.install(policy("base: {models: {deny: [opus]}}\n"))  # no caps at all now
    assert admitted(gate, ann) == {}
    with pytest.raises(ClientInputError):
        admitted(gate, ann, messages_request(OPUS))


def test_an_admin_set_cap_applies_to_the_next_request() -> None:
    clock = Clock(NOON)
    gate, holder = gate_for("groups: [{group: eng, pool: {daily_usd: 10}}]\n", clock)
    ann = user()
    spend(gate, ann, 5.0)
    assert admitted(gate, ann)[U + "overage-utilization"] == "0.5"
    holder.set_cap("group", "eng", Period.DAILY, 5.0)  # what the admin API does
    with pytest.raises(GatewayError) as refused:
        admitted(gate, ann)
    assert refused.value.status == 429 and refused.value.error_type == "billing_error"
    holder.set_cap("group", "eng", Period.DAILY, None)  # removed: nothing capped
    assert admitted(gate, ann) == {}


def test_a_new_utc_day_counts_on_the_new_days_counters() -> None:
    clock = Clock(NOON)
    gate, _ = gate_for("base: {spend_caps: {daily_usd: 10}}\n", clock)
    ann = user()
    spend(gate, ann, 9.6)
    today = admitted(gate, ann)
    assert today[U + "overage-surpassed-threshold"] == "0.95"
    clock.now += 86_400  # the plan made yesterday holds yesterday's window and counter key
    tomorrow = admitted(gate, ann)
    assert tomorrow[U + "overage-utilization"] == "0" and tomorrow[U + "status"] == "allowed"
    assert int(tomorrow[U + "reset"]) == int(today[U + "reset"]) + 86_400


def test_a_principal_whose_groups_changed_gets_its_new_groups_policy() -> None:
    """After a refresh with new groups the token (and so the principal) is a new one: equal subject,
    other groups; it must not be answered from the old principal's plan."""
    clock = Clock(NOON)
    text = "groups: [{group: eng, pool: {daily_usd: 10}}, {group: ops, pool: {daily_usd: 1000}}]\n"
    gate, _ = gate_for(text, clock)
    before, after = user("ann", ("eng",)), user("ann", ("ops",))
    spend(gate, before, 6.0)  # charged to the eng pool: 60 % of it
    assert admitted(gate, before)[U + "overage-utilization"] == "0.6"
    assert admitted(gate, after)[U + "overage-utilization"] == "0"  # the ops pool, untouched
    spend(gate, after, 10.0)
    assert admitted(gate, after)[U + "overage-utilization"] == "0.01"
    assert admitted(gate, before)[U + "overage-utilization"] == "0.6"


def test_the_kept_headers_follow_the_spend() -> None:
    """The usage-limit headers kept per plan are looked up by the spend of each request, not kept
    as the first request's."""
    clock = Clock(NOON)
    gate, _ = gate_for("base: {spend_caps: {daily_usd: 10, monthly_usd: 20}}\n", clock)
    ann = user()
    seen = []
    for _ in range(4):
        headers = admitted(gate, ann)
        seen.append((headers[U + "overage-utilization"], headers[U + "status"], headers[U + "reset"]))
        spend(gate, ann, 3.0)
    daily_reset = str(int(datetime(2026, 12, 3, tzinfo=UTC).timestamp()))
    assert seen == [
        ("0", "allowed", daily_reset),  # nothing spent: of two equal caps the later checked
        ("0.3", "allowed", daily_reset),
        ("0.6", "allowed", daily_reset),
        ("0.9", "allowed_warning", daily_reset),
    ]


def test_the_plans_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(policy_gate, "MAX_PLANS", 8)
    clock = Clock(NOON)
    gate, _ = gate_for("base: {spend_caps: {daily_usd: 10}}\n", clock)
    for index in range(50):
        admitted(gate, user(f"user-{index}"))
        assert len(gate._entries) <= 8
    ann = user("user-0")  # forgotten long ago: made again, with its spend still counted
    spend(gate, ann, 5.0)
    assert admitted(gate, ann)[U + "overage-utilization"] == "0.5"
