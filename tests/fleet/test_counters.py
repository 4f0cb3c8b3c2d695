"""The embedded counters with an injected clock: exact rates, token charging, stream slots, spend."""

from __future__ import annotations

import asyncio
import time

from gateway.fleet.counters import Admitted, Checks, MemoryCounters, Refused, SpendCheck
from gateway.fleet.policy import Rate
from gateway.fleet.rate_limits import request_check, slot_check, token_check

T0 = 1_800_000_000.0


def run_requests(limit: int, seconds: float, step: float) -> int:
    """Offer a request every ``step`` virtual seconds for ``seconds``; how many were let in."""
    counters = MemoryCounters()
    check = request_check(Rate("user", "u", "requests", limit))
    allowed, now = 0, T0
    while now < T0 + seconds - 1e-9:
        result = counters.admit_now(now, Checks(rates=(check,)), "t")
        allowed += isinstance(result, Admitted)
        now += step
    return allowed


def test_request_rate_is_exact_with_a_one_second_burst() -> None:
    # 60/min: one a second, burst 1; offered every 10 ms for 60 s -> 60 exactly
    assert run_requests(60, 60, 0.01) == 60
    # 600/min: ten a second, burst of ten: 600 in a minute plus the burst (10) minus the last
    # interval not yet elapsed -> 600 + 10 - 1 ... bounded by limit + burst
    allowed = run_requests(600, 60, 0.001)
    assert 600 <= allowed <= 610
    # 30 s at 1200/min: 600 plus a 20-request burst at most
    allowed = run_requests(1200, 30, 0.0005)
    assert 600 <= allowed <= 620


def test_a_refusal_says_when_to_retry_and_commits_nothing() -> None:
    counters = MemoryCounters()
    check = request_check(Rate("user", "u", "requests", 6))  # one per 10 s, burst 1
    assert isinstance(counters.admit_now(T0, Checks(rates=(check,)), "a"), Admitted)
    refused = counters.admit_now(T0 + 4, Checks(rates=(check,)), "b")
    assert isinstance(refused, Refused) and refused.kind == "rate"
    assert abs(refused.retry_after_s - 6.0) < 1e-6
    assert isinstance(counters.admit_now(T0 + 10, Checks(rates=(check,)), "c"), Admitted)


def test_tokens_are_charged_at_record_and_refuse_while_overdrawn() -> None:
    counters = MemoryCounters()
    tokens = token_check(Rate("user", "u", "tokens", 6000))  # 100 tokens a second, a minute's burst
    assert isinstance(counters.admit_now(T0, Checks(rates=(tokens,)), "a"), Admitted)
    counters.record(T0, Checks(rates=(tokens,)), 0, 9000, "a")  # 90 s worth of tokens
    refused = counters.admit_now(T0 + 1, Checks(rates=(tokens,)), "b")
    assert isinstance(refused, Refused) and abs(refused.retry_after_s - 29.0) < 1e-6
    assert isinstance(counters.admit_now(T0 + 30, Checks(rates=(tokens,)), "c"), Admitted)


def test_stream_slots_are_taken_and_freed() -> None:
    counters = MemoryCounters()
    slot = slot_check(Rate("group", "eng", "streams", 2))
    assert isinstance(counters.admit_now(T0, Checks(slots=(slot,)), "a"), Admitted)
    assert isinstance(counters.admit_now(T0, Checks(slots=(slot,)), "b"), Admitted)
    assert isinstance(counters.admit_now(T0, Checks(slots=(slot,)), "c"), Refused)
    counters.record(T0, Checks(slots=(slot,)), 0, 0, "a")
    assert isinstance(counters.admit_now(T0, Checks(slots=(slot,)), "d"), Admitted)
    # a slot whose holder never finished (a dead replica) expires after an hour
    assert isinstance(counters.admit_now(T0 + 3601, Checks(slots=(slot,)), "e"), Admitted)
    none = slot_check(Rate("user", "u", "streams", 0))  # no streams at all: refused with none held
    assert counters.admit_now(T0, Checks(slots=(none,)), "f") == Refused("slot", 0)


def test_a_refused_stream_takes_none_of_its_slots() -> None:
    """The user's slot is checked and taken first; the group's refuses: the user's is given back."""
    counters = MemoryCounters()
    mine = slot_check(Rate("user", "u", "streams", 1))
    pool = slot_check(Rate("group", "eng", "streams", 1))
    assert isinstance(counters.admit_now(T0, Checks(slots=(pool,)), "colleague"), Admitted)
    assert counters.admit_now(T0, Checks(slots=(mine, pool)), "a") == Refused("slot", 1)
    assert isinstance(counters.admit_now(T0, Checks(slots=(mine,)), "b"), Admitted)  # still free
    counters.record(T0, Checks(slots=(pool,)), 0, 0, "colleague")
    assert counters.admit_now(T0, Checks(slots=(mine, pool)), "c") == Refused("slot", 0)  # b holds it


def test_spend_refuses_at_the_cap_and_reports_what_was_used() -> None:
    counters = MemoryCounters()
    cap = SpendCheck("spend:u:daily", 1_000_000, int(T0) + 86_400)
    first = counters.admit_now(T0, Checks(spend=(cap,)), "a")
    assert isinstance(first, Admitted) and first.spent_micros == [0]
    counters.record(T0, Checks(spend=(cap,)), 999_999, 0, "a")
    second = counters.admit_now(T0, Checks(spend=(cap,)), "b")
    assert isinstance(second, Admitted) and second.spent_micros == [999_999]
    counters.record(T0, Checks(spend=(cap,)), 5, 0, "b")
    assert counters.admit_now(T0, Checks(spend=(cap,)), "c") == Refused("spend", 0)
    assert asyncio.run(counters.read_spend((cap.key, "other"))) == [1_000_004, 0]


def test_real_time_rate_is_within_five_percent() -> None:
    """A short real-time run (the 30 s measurement over HTTP is ``python -m bench.rate_limits``):
    offered far faster than allowed, the rate let through after the initial burst is the limit."""
    counters = MemoryCounters()
    check = request_check(Rate("user", "u", "requests", 3000))  # 50/s, burst 50
    allowed_at: list[float] = []
    start = time.time()
    while (now := time.time()) - start < 2.0:
        if isinstance(counters.admit_now(now, Checks(rates=(check,)), "t"), Admitted):
            allowed_at.append(now - start)
        time.sleep(0.0005)
    steady = [t for t in allowed_at if t >= 0.5]  # after the burst
    rate = len(steady) / (2.0 - 0.5)
    assert abs(rate - 50) / 50 <= 0.05, rate
