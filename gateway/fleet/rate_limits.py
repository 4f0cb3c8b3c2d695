"""Request-rate, token-rate and concurrent-stream limits (beyond Anthropic's gateway).

Per user (``rate_limits``) and per group pool (``pool_rate_limits``), each a GCRA in
:mod:`gateway.fleet.counters`; a refusal is ``429 rate_limit_error`` with ``retry-after``.

Details: docs/internals/gateway-fleet.md
"""

from __future__ import annotations

import math
from typing import Final
from urllib.parse import quote

from gateway.errors import GatewayError
from gateway.fleet.counters import RateCheck, SlotCheck
from gateway.fleet.policy import Rate

KEY_PREFIX: Final = "switchyard:fleet:"
TOKEN_BURST_S: Final = 60.0  # a minute's tokens may be used at once


def _owner(rate: Rate) -> str:
    return f"{rate.scope}:{quote(rate.owner, safe='@')}"


def request_check(rate: Rate) -> RateCheck:
    interval = 60.0 / rate.limit
    burst = max(1, math.floor(rate.limit / 60))
    return RateCheck(f"{KEY_PREFIX}rate:{_owner(rate)}:requests", interval, interval * burst, 1)


def token_check(rate: Rate) -> RateCheck:
    return RateCheck(f"{KEY_PREFIX}rate:{_owner(rate)}:tokens", 60.0 / rate.limit, TOKEN_BURST_S, 0)


def slot_check(rate: Rate) -> SlotCheck:
    return SlotCheck(f"{KEY_PREFIX}streams:{_owner(rate)}", rate.limit)


def describe(rate: Rate) -> str:
    whose = "your" if rate.scope == "user" else f"group {rate.owner}'s shared"
    if rate.kind == "requests":
        return f"{whose} limit of {rate.limit} requests per minute"
    if rate.kind == "tokens":
        return f"{whose} limit of {rate.limit} tokens per minute"
    return f"{whose} limit of {rate.limit} concurrent streams"


def rate_limited(rate: Rate, retry_after_s: float) -> GatewayError:
    seconds = max(1, math.ceil(retry_after_s))
    return GatewayError(
        429,
        f"Rate limited: {describe(rate)} on this gateway is reached; retry in {seconds} s.",
        error_type="rate_limit_error",
        headers={"retry-after": str(seconds)},
    )
