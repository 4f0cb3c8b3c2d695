"""Spend caps as the gateway protocol shows them (fleet-gateway.md section 4).

The caps of a request are read together; the *binding* one decides what the client sees: an
exceeded cap before any other (of those, the one that resets last), else the most used one (the
rule Anthropic's gateway follows). On an allowed request of a capped principal the
``anthropic-ratelimit-unified-*`` headers carry its utilisation (rounded to two decimals, shown
below 1 while allowed) and, once more than 75 % / 95 % is used, the surpassed threshold. A reached
cap is a ``429 billing_error`` before proxying, with ``retry-after`` to the period's end. Costs are
kept as integer micro-USD; the usage endpoint reports cents.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import compress
from operator import itemgetter, truediv
from types import MappingProxyType
from typing import Any, Final
from urllib.parse import quote

from gateway.errors import GatewayError
from gateway.fleet.counters import SPEND_KEPT_AFTER_S, SpendCheck
from gateway.fleet.periods import Period, Window, window
from gateway.fleet.policy import Cap

UNIFIED: Final = "anthropic-ratelimit-unified-"
UPSTREAM_RATELIMIT: Final = "anthropic-ratelimit-"
THRESHOLDS: Final = (0.95, 0.75)
_ASCENDING: Final = sorted(THRESHOLDS)  # bisect_left(_ASCENDING, u): how many u is past
MAX_HEADER_NAMES: Final = 1024
MAX_KEPT_HEADERS: Final = 4096
MICROS: Final = 1_000_000
MAX_MICROS: Final = 2**53  # exact in a double (Redis' Lua numbers); far above MAX_CAP_USD's
KEY_PREFIX: Final = "switchyard:fleet:spend:"
_MONTHS: Final = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
# the order caps are checked in (the first exceeded one is reported): longest period first
_PERIOD_RANK: Final = {Period.MONTHLY: 0, Period.WEEKLY: 1, Period.DAILY: 2}


def micros(usd: float) -> int:
    """USD as integer micro-USD, within ``±MAX_MICROS`` (an infinity is the bound, NaN is 0)."""
    if math.isnan(usd):
        return 0
    return round(max(-MAX_MICROS, min(MAX_MICROS, usd * MICROS)))


def spend_key(scope: str, owner: str, win: Window) -> str:
    return f"{KEY_PREFIX}{scope}:{quote(owner, safe='@')}:{win.period.value}:{win.name}"


def ordered(caps: tuple[Cap, ...]) -> tuple[Cap, ...]:
    return tuple(sorted(caps, key=lambda cap: _PERIOD_RANK[cap.period]))


def spend_checks(caps: tuple[Cap, ...], now: float) -> tuple[tuple[SpendCheck, ...], tuple[Window, ...]]:
    checks, windows = [], []
    for cap in caps:
        win = window(cap.period, now)
        checks.append(
            SpendCheck(
                spend_key(cap.scope, cap.owner, win), micros(cap.limit_usd), win.reset_at + SPEND_KEPT_AFTER_S
            )
        )
        windows.append(win)
    return tuple(checks), tuple(windows)


@dataclass(frozen=True, slots=True)
class CapState:
    cap: Cap
    window: Window
    used_micros: int
    # derived once: ``binding`` compares every state's figures with every other's
    limit_micros: int = field(init=False)
    exceeded: bool = field(init=False)
    utilization: float = field(init=False)

    def __post_init__(self) -> None:
        limit = micros(self.cap.limit_usd)
        object.__setattr__(self, "limit_micros", limit)
        object.__setattr__(self, "exceeded", self.used_micros >= limit)
        object.__setattr__(self, "utilization", self.used_micros / limit if limit > 0 else 1.0)

    @property
    def shown(self) -> float:
        """Utilisation to two decimals; below 1 unless exceeded."""
        rounded = round(self.utilization * 100) / 100
        return rounded if self.exceeded else min(rounded, 0.99)


def binding(states: list[CapState]) -> CapState | None:
    best: CapState | None = None
    for state in states:
        if best is None:
            best = state
        elif best.exceeded != state.exceeded:
            best = best if best.exceeded else state
        elif best.exceeded:
            best = best if best.window.end > state.window.end else state
        else:
            best = best if best.utilization > state.utilization else state
    return best


class AllowedHeaders:
    """:func:`allowed_headers` of an admitted request of one plan's caps, given what each cap's
    counter held (the request path).

    While no cap is exceeded the binding one is the most used (the later on a tie), and its
    headers depend only on which cap it is, its utilisation in whole percent, and the threshold
    it passed: they are made once per such triple and kept (caps x 101 x 3 of them), so the
    request path computes one utilisation per cap and looks them up (at most ``MAX_KEPT_HEADERS``). An exceeded cap (a counter
    admitted it anyway) takes the general rule, uncached.
    """

    __slots__ = ("_general", "_last", "_made", "caps", "limits", "windows")

    def __init__(self, caps: tuple[Cap, ...], windows: tuple[Window, ...], limits: tuple[int, ...]) -> None:
        self.caps, self.windows, self.limits = caps, windows, limits
        self._general = 0 in limits  # a cap of nothing is exceeded at once (and divides by 0)
        self._last = len(limits) - 1
        self._made: dict[tuple[int, int, int], Mapping[str, str]] = {}

    def __call__(self, spent: list[int]) -> Mapping[str, str]:
        if self._general:
            return self._general_rule(spent)
        utilizations = list(map(truediv, spent, self.limits))
        most = max(utilizations)
        if most >= 1.0:  # exceeded
            return self._general_rule(spent)
        index = self._last - utilizations[::-1].index(most)  # the later on a tie
        # which cap, its percent as shown, how many thresholds it is past (0, 1 or 2)
        key = (index, round(most * 100), bisect_left(_ASCENDING, most))
        made = self._made.get(key)
        if made is None:
            if len(self._made) >= MAX_KEPT_HEADERS:  # only a negative spend gets here
                self._made.clear()
            state = CapState(self.caps[index], self.windows[index], spent[index])
            made = self._made[key] = MappingProxyType(allowed_headers(state))
        return made

    def _general_rule(self, spent: list[int]) -> Mapping[str, str]:
        found = binding([CapState(*row) for row in zip(self.caps, self.windows, spent, strict=True)])
        assert found is not None
        return allowed_headers(found)


def number(value: float) -> str:
    """A fraction as JavaScript prints it after rounding to two decimals (``0.8``, ``0.75``, ``1``)."""
    return f"{value:.2f}".rstrip("0").rstrip(".")


def allowed_headers(state: CapState) -> dict[str, str]:
    """The usage-limit headers of an allowed request whose binding cap is ``state``."""
    threshold = next((t for t in THRESHOLDS if state.utilization > t), None)
    status = "allowed_warning" if threshold is not None else "allowed"
    reset = str(state.window.reset_at)
    headers = {
        UNIFIED + "status": status,
        UNIFIED + "reset": reset,
        UNIFIED + "overage-reset": reset,
        UNIFIED + "overage-utilization": number(state.shown),
        UNIFIED + "representative-claim": "overage",
        UNIFIED + "overage-status": status,
    }
    if threshold is not None:
        headers[UNIFIED + "overage-surpassed-threshold"] = number(threshold)
    return headers


def cap_reached(state: CapState, now: float) -> GatewayError:
    """The ``429 billing_error`` of a reached cap (no ``-representative-claim``/``-overage-status``:
    with them the client would replace the message with its own)."""
    reset = str(state.window.reset_at)
    headers = {
        "retry-after": str(state.window.seconds_left(now)),
        UNIFIED + "status": "rejected",
        UNIFIED + "reset": reset,
        UNIFIED + "overage-reset": reset,
        UNIFIED + "overage-utilization": "1",
        UNIFIED + "overage-surpassed-threshold": "1",
        UNIFIED + "overage-period": state.window.period.value,
        UNIFIED + "overage-disabled-reason": "org_spend_cap_reached",
    }
    if state.cap.scope == "group":
        headers[UNIFIED + "overage-scope"] = "group_pool"
    return GatewayError(
        429, reached_message(state), error_type="billing_error", should_retry=False, headers=headers
    )


def reached_message(state: CapState) -> str:
    end = state.window.end
    when = f"{_MONTHS[end.month - 1]} {end.day} 00:00 UTC"
    period = state.window.period.value
    limit = f"${state.cap.limit_usd:,.2f}"
    if state.cap.scope == "group":
        whose = f"your group {state.cap.owner}'s shared {period} spend limit of {limit}"
    elif state.cap.scope == "org":
        whose = f"the organisation's {period} spend limit of {limit}"
    else:
        whose = f"your {period} spend limit of {limit}"
    return f"Spend limit reached: {whose} resets {when}; ask your gateway administrator to raise it to continue sooner."


def counters_down() -> GatewayError:
    """Fail-closed on a counter outage: the protocol's ``fetch_error`` shape, message only."""
    return GatewayError(
        429,
        "spend limit unavailable: the gateway cannot check spend limits right now",
        error_type="billing_error",
        should_retry=False,
        headers={UNIFIED + "overage-disabled-reason": "fetch_error"},
    )


class _KeptNames(dict[str, bool]):
    """Header name -> whether it is kept (not the upstream's ``anthropic-ratelimit-*``), found
    once per spelling (an upstream sends the same few names on every response; bounded)."""

    def __missing__(self, name: str) -> bool:
        kept = not name.lower().startswith(UPSTREAM_RATELIMIT)
        if len(self) < MAX_HEADER_NAMES:
            self[name] = kept
        return kept


_KEPT: Final = _KeptNames()


def strip_upstream_limits(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The upstream's own ``anthropic-ratelimit-*`` headers removed (they describe the gateway's
    account, not the capped user's budget)."""
    return list(compress(headers, map(_KEPT.__getitem__, map(itemgetter(0), headers))))


def _cents(value_micros: int) -> int:
    return math.floor(value_micros / 10_000)


def usage_body(states: list[CapState], uncapped: dict[Period, int] | None) -> dict[str, Any]:
    """``GET /api/oauth/usage``: the caps' rows, or for an uncapped principal its own spend."""
    if not states:
        spent = uncapped or {}
        return {
            "extra_usage": {
                "is_enabled": True,
                "monthly_limit": None,
                "used_credits": _cents(spent.get(Period.MONTHLY, 0)),
                "utilization": None,
                "currency": "USD",
                "daily": {
                    "limit": None,
                    "used_credits": _cents(spent.get(Period.DAILY, 0)),
                    "utilization": None,
                },
                "weekly": {
                    "limit": None,
                    "used_credits": _cents(spent.get(Period.WEEKLY, 0)),
                    "utilization": None,
                },
            },
            "limits": [],
        }
    active = binding(states)
    assert active is not None
    rows = []
    for state in states:
        severity = (
            "critical"
            if state.exceeded or state.utilization > 0.95
            else "warning"
            if state.utilization > 0.75
            else "normal"
        )
        rows.append(
            {
                "kind": "spend",
                "group": state.window.period.value,
                "percent": round(state.shown * 100),
                "resets_at": state.window.reset_iso(),
                "severity": severity,
                "is_active": state is active,
            }
        )
    return {
        "extra_usage": {
            "is_enabled": True,
            "monthly_limit": round(active.limit_micros / 10_000),
            "used_credits": _cents(active.used_micros),
            "utilization": round(active.shown * 100),
            "currency": "USD",
        },
        "limits": rows,
    }
