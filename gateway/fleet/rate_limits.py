"""Request-rate, token-rate and concurrent-stream limits (beyond Anthropic's gateway).

Per user (``rate_limits``) and shared by a group's members (``pool_rate_limits``). The counters
(:mod:`gateway.fleet.counters`) run a GCRA per limit:

* ``requests_per_minute``: one request every ``60 / limit`` seconds on average, with a burst of one
  second's worth (at least one request) on top: over a minute or more the allowed rate is the limit;
* ``tokens_per_minute``: input plus output tokens of the finished requests (cache reads and writes
  included), charged when the usage is known; a request is refused while more than a minute's
  worth is outstanding, so the long-run rate is the limit;
* ``concurrent_streams``: streaming requests (``"stream": true``) open at once.

A refusal is ``429 rate_limit_error`` with ``retry-after`` (whole seconds, at least 1): when the
refused check would pass; for streams a fixed 1 s (a slot frees when any stream ends).
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
