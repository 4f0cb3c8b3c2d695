"""Calendar periods, the usage-limit headers at 75 % and 95 %, the 429 shapes and the usage body
(fleet-gateway.md section 4)."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.fleet.periods import Period, window
from gateway.fleet.policy import Cap
from gateway.fleet.spend_caps import (
    AllowedHeaders,
    CapState,
    allowed_headers,
    binding,
    cap_reached,
    counters_down,
    spend_checks,
    strip_upstream_limits,
    usage_body,
)

U = "anthropic-ratelimit-unified-"


def ts(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def test_periods_are_utc_calendar_periods() -> None:
    now = ts("2026-12-31T23:59:30")  # a Thursday
    assert window(Period.DAILY, now).reset_iso() == "2027-01-01T00:00:00.000Z"
    weekly = window(Period.WEEKLY, now)
    assert weekly.name == "2026-12-28" and weekly.start.weekday() == 0  # from Monday
    assert weekly.reset_iso() == "2027-01-04T00:00:00.000Z"
    assert window(Period.MONTHLY, now).reset_at == int(ts("2027-01-01T00:00:00"))
    assert window(Period.DAILY, now).seconds_left(now) == 30
    assert window(Period.MONTHLY, ts("2026-02-10T00:00:00")).reset_iso() == "2026-03-01T00:00:00.000Z"


def state(
    used_usd: float, limit: float = 10.0, period: Period = Period.DAILY, scope: str = "user"
) -> CapState:
    now = ts("2026-12-01T12:00:00")
    return CapState(
        Cap(scope, "g" if scope == "group" else "u", period, limit),
        window(period, now),
        round(used_usd * 1e6),
    )  # type: ignore[arg-type]


def test_headers_below_and_past_the_thresholds() -> None:
    below = allowed_headers(state(7.5))  # exactly 75 %: not past it
    assert below == {
        U + "status": "allowed",
        U + "reset": str(int(ts("2026-12-02T00:00:00"))),
        U + "overage-reset": str(int(ts("2026-12-02T00:00:00"))),
        U + "overage-utilization": "0.75",
        U + "representative-claim": "overage",
        U + "overage-status": "allowed",
    }
    warned = allowed_headers(state(7.6))
    assert warned[U + "status"] == warned[U + "overage-status"] == "allowed_warning"
    assert warned[U + "overage-surpassed-threshold"] == "0.75"
    assert warned[U + "overage-utilization"] == "0.76"
    high = allowed_headers(state(9.99))
    assert high[U + "overage-surpassed-threshold"] == "0.95"
    assert high[U + "overage-utilization"] == "0.99"  # never 1 while allowed
    assert allowed_headers(state(8.0))[U + "overage-utilization"] == "0.8"  # as JavaScript prints it


def test_binding_cap_prefers_exceeded_then_latest_reset_then_most_used() -> None:
    daily, monthly = state(5, period=Period.DAILY), state(90, 100, Period.MONTHLY)
    assert binding([daily, monthly]) is monthly
    reached_daily, reached_monthly = state(10), state(100, 100, Period.MONTHLY)
    assert binding([reached_daily, monthly]) is reached_daily
    assert binding([reached_daily, reached_monthly]) is reached_monthly


def test_cap_reached_shape() -> None:
    now = ts("2026-12-01T23:00:00")
    reached = CapState(Cap("user", "u", Period.DAILY, 10), window(Period.DAILY, now), 10_000_000)
    error = cap_reached(reached, now)
    headers = error.response_headers()
    assert (error.status, error.error_type) == (429, "billing_error")
    assert headers["retry-after"] == "3600" and headers["x-should-retry"] == "false"
    assert headers[U + "status"] == "rejected"
    assert headers[U + "overage-utilization"] == "1" and headers[U + "overage-surpassed-threshold"] == "1"
    assert headers[U + "overage-period"] == "daily"
    assert headers[U + "overage-disabled-reason"] == "org_spend_cap_reached"
    assert U + "representative-claim" not in headers and U + "overage-status" not in headers
    assert U + "overage-scope" not in headers
    assert "resets Dec 2 00:00 UTC" in error.message and error.message.endswith("sooner.")
    assert error.message.rstrip(".").count(". ") == 0  # one sentence
    pool = cap_reached(state(500, 500, Period.MONTHLY, "group"), now)
    assert pool.response_headers()[U + "overage-scope"] == "group_pool"
    assert pool.response_headers()[U + "overage-period"] == "monthly"


def test_fail_closed_is_the_fetch_error_shape() -> None:
    error = counters_down()
    assert error.status == 429
    assert error.response_headers() == {
        "content-type": "application/json",
        U + "overage-disabled-reason": "fetch_error",
        "x-should-retry": "false",
    }


def test_upstream_rate_limit_headers_are_stripped() -> None:
    kept = strip_upstream_limits(
        [
            ("Anthropic-RateLimit-Requests-Limit", "4000"),
            ("request-id", "r"),
            ("anthropic-ratelimit-tokens-reset", "x"),
        ]
    )
    assert kept == [("request-id", "r")]


def test_usage_bodies() -> None:
    rows = usage_body([state(8), state(20, 100, Period.MONTHLY)], None)
    assert rows["extra_usage"] == {
        "is_enabled": True,
        "monthly_limit": 1000,  # the binding (most used) cap, in cents
        "used_credits": 800,
        "utilization": 80,
        "currency": "USD",
    }
    assert rows["limits"] == [
        {
            "kind": "spend",
            "group": "daily",
            "percent": 80,
            "resets_at": "2026-12-02T00:00:00.000Z",
            "severity": "warning",
            "is_active": True,
        },
        {
            "kind": "spend",
            "group": "monthly",
            "percent": 20,
            "resets_at": "2027-01-01T00:00:00.000Z",
            "severity": "normal",
            "is_active": False,
        },
    ]
    uncapped = usage_body([], {Period.DAILY: 1_234_567, Period.WEEKLY: 2_000_000, Period.MONTHLY: 9_990_000})
    assert uncapped == {
        "extra_usage": {
            "is_enabled": True,
            "monthly_limit": None,
            "used_credits": 999,
            "utilization": None,
            "currency": "USD",
            "daily": {"limit": None, "used_credits": 123, "utilization": None},
            "weekly": {"limit": None, "used_credits": 200, "utilization": None},
        },
        "limits": [],
    }


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(list(Period)),
            st.integers(min_value=0, max_value=50),  # limit, USD
            st.integers(min_value=0, max_value=60_000_000),  # used, micros
        ),
        min_size=1,
        max_size=5,
    )
)
def test_binding_of_an_admitted_request_is_the_general_rule(rows: list[tuple[Period, int, int]]) -> None:
    """The request path's headers (a cache per binding cap, percent and threshold) are those of
    the general rule's binding cap, on first sight and when looked up again."""
    now = datetime(2026, 12, 2, 12, tzinfo=UTC).timestamp()
    caps = tuple(Cap("user", "idp|u", period, float(limit)) for period, limit, _ in rows)
    checks, windows = spend_checks(caps, now)
    spent = [used for _, _, used in rows]
    general = binding([CapState(cap, win, used) for cap, win, used in zip(caps, windows, spent, strict=True)])
    assert general is not None
    shortcut = AllowedHeaders(caps, windows, tuple(check.limit_micros for check in checks))
    assert shortcut(spent) == allowed_headers(general)
    assert shortcut(spent) == allowed_headers(general)  # the kept answer


def test_allowed_headers_are_kept_per_percent_and_threshold() -> None:
    """Two spends that round to the same percent share one answer, unless one of them has passed
    a threshold the other has not (75.4 % and 75.0 % both show 0.75; only the first warns)."""
    now = datetime(2026, 12, 2, 12, tzinfo=UTC).timestamp()
    caps = (Cap("user", "u", Period.DAILY, 10.0), Cap("org", "", Period.MONTHLY, 1000.0))
    checks, windows = spend_checks(caps, now)
    headers = AllowedHeaders(caps, windows, tuple(check.limit_micros for check in checks))
    passed, at = headers([7_540_000, 0]), headers([7_500_000, 0])
    assert passed[U + "overage-utilization"] == at[U + "overage-utilization"] == "0.75"
    assert passed[U + "status"] == "allowed_warning" and at[U + "status"] == "allowed"
    assert headers([7_510_000, 0]) is passed  # 75.1 %: the same answer, not made again
    monthly = headers([0, 800_000_000])  # the organisation's monthly cap binds now
    assert monthly[U + "reset"] == str(windows[1].reset_at) != passed[U + "reset"]
