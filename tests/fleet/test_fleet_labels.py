"""Bounded labels of the fleet series: the top-spenders top-k, groups, user names, active users."""

from __future__ import annotations

import random

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from gateway.fleet.fleet_labels import ActiveUsers, GroupLabels, user_label
from gateway.fleet.fleet_metrics import FleetMetrics
from gateway.fleet.principal import Principal, Source
from gateway.fleet.topk import OTHER, TopSpenders


def user(name: str, *groups: str, email: str | None = None) -> Principal:
    return Principal(subject=name, team=name, groups=groups, email=email, source=Source.TOKEN)


def test_top_spenders_find_the_heavy_users_among_many() -> None:
    rng = random.Random(7)
    heavy = {f"heavy-{i}": 50.0 + 10 * i for i in range(5)}  # USD each, over the whole run
    light = [f"light-{i}" for i in range(20_000)]
    events = [(name, total / 100) for name, total in heavy.items() for _ in range(100)]
    events += [(name, rng.uniform(0.0, 0.02)) for name in light]
    rng.shuffle(events)
    top = TopSpenders(k=5, capacity=200)
    counted: dict[str, float] = {}
    for name, amount in events:
        placement = top.add(name, amount)
        assert len(top.labelled) <= 5
        counted[placement.label] = counted.get(placement.label, 0.0) + amount
    assert top.labelled == frozenset(heavy)  # the true top five hold the labels at the end
    # nothing lost, nothing twice (sums in another order: equal to rounding)
    assert sum(counted.values()) == pytest.approx(sum(amount for _, amount in events), rel=1e-12)
    assert set(counted) <= {*heavy, OTHER} | set(light)
    for name, total in heavy.items():  # a heavy user's spend is mostly under its own label
        assert counted[name] >= 0.5 * total
    for name, total in heavy.items():  # space-saving overestimates, never underestimates
        assert top.estimate(name) >= total - 1e-9


def test_user_cost_series_stay_bounded_and_evicted_series_go() -> None:
    registry = CollectorRegistry()
    metrics = FleetMetrics(registry, groups=GroupLabels((), 10), top_users=3)
    for i in range(50):
        metrics.user_spend(f"user-{i}@example.com", 1.0 + i)  # each newcomer outspends the weakest
    series = {
        sample.labels["user"]: sample.value
        for family in metrics.user_cost.collect()
        for sample in family.samples
        if sample.name == "gateway_fleet_user_cost_usd_total"
    }
    assert set(series) == {"user-47@example.com", "user-48@example.com", "user-49@example.com", OTHER}
    # every newcomer outspent the weakest holder and took its label; the amount that earned it a
    # label is counted under other (the new series starts at zero), so the sum is all the spend
    assert series[OTHER] == sum(1.0 + i for i in range(50))
    assert sum(series.values()) == series[OTHER]
    metrics.user_spend("user-49@example.com", 2.5)  # not scraped at zero yet: still other
    assert metrics.user_cost.labels("user-49@example.com")._value.get() == 0
    generate_latest(registry)  # a scrape saw the series at zero: from now on its own label
    metrics.user_spend("user-49@example.com", 2.5)
    assert metrics.user_cost.labels("user-49@example.com")._value.get() == 2.5


def test_group_labels_configured_or_first_come() -> None:
    listed = GroupLabels(("platform", "ml"), limit=1)
    assert listed(user("a", "eng", "ml", "platform")) == "platform"  # listed order is priority
    assert listed(user("b", "ml")) == "ml"
    assert listed(user("c", "sales")) == OTHER
    assert listed.known == ("platform", "ml", OTHER)
    first_come = GroupLabels((), limit=2)
    assert [first_come(user(str(i), f"g{i}")) for i in range(4)] == ["g0", "g1", OTHER, OTHER]
    assert first_come(user("x", "g1", "g0")) == "g1"  # a caller's first group
    assert first_come(user("y")) == OTHER and first_come(user("z", "bad\nname")) == OTHER
    assert first_come.known == ("g0", "g1", OTHER)


def test_user_label_prefers_the_email_and_refuses_odd_values() -> None:
    assert user_label(user("sub-1", email="dev@example.com")) == "dev@example.com"
    assert user_label(user("sub-1")) == "sub-1"
    assert user_label(Principal.for_key("ci")) == "key:ci"
    assert user_label(user("x" * 200)) == OTHER
    assert user_label(user("a\x00b")) == OTHER


def test_active_users_window_and_capacity() -> None:
    now = [0.0]
    active = ActiveUsers(window_s=100, capacity=3, clock=lambda: now[0])
    for name, group in (("a", "g"), ("b", "g"), ("c", "h")):
        active.saw(name, group)
        now[0] += 10
    assert active.counts() == {"g": 2, "h": 1}
    active.saw("d", "h")  # over capacity: the least recently seen ("a") is forgotten
    assert active.counts() == {"g": 1, "h": 2}
    now[0] = 125  # b was seen at 10: outside the window
    active.saw("c", "h")
    assert active.counts() == {"h": 2}
    now[0] = 1000
    assert active.counts() == {}
