"""The retry budget: the gateway shares retries with its client instead of stacking them.

If the gateway spent its full ``GATEWAY_MAX_RETRIES`` under every attempt of a client that retries
too, one prompt would cost (1 + client retries) x (1 + gateway retries) upstream attempts: 33 for
the SDK's defaults, 121 for Claude Code's (both measured against a persistent 529).

Which attempt of its client a request is: the larger of

* ``x-stainless-retry-count``, which the SDKs send (0, then 1, 2 on their retries; ``max_retries``
  defaults to 2); a client sending the header retries on its own;
* the number of times the gateway has just answered this same request with a retryable error
  (``gateway.retry_memory``). Claude Code needs this: it retries at the application level (10
  times by default) with a fresh SDK request each time, so its header always says 0.

Budget of one request: a client that neither sends the header nor repeats a failed request gets
``GATEWAY_MAX_RETRIES``; otherwise attempt ``n`` gets ``max(0, K - n)`` retries with
``K = GATEWAY_CLIENT_RETRYING_MAX_RETRIES`` (default 1, at most ``GATEWAY_MAX_RETRIES``): the first
attempt gets a quick gateway retry that absorbs a blip before the client sees an error; the
client's own retries come after its own back-off and get none. Always within
``GATEWAY_REQUEST_DEADLINE_S``.

A request that ends in an error the client would retry (408, 409, 429, 5xx, 529) is answered with
(``final_headers``; the server adds ``x-gateway-retries``, the retries made for this request):

* ``retry-after`` (whole seconds) and ``retry-after-ms``: the upstream's hint when it sent one (the
  missing whole-second form derived, rounded up), else the gateway's suggestion: 0.5 s doubling
  with each upstream attempt the prompt has cost so far, capped at 8 s, minus up to 25 % jitter;
* ``x-should-retry: false`` when another attempt cannot help or would stack: the upstream said
  ``false`` or the gateway's error is permanent (TLS verification...); the next wait would pass the
  request deadline; the client has already retried ``GATEWAY_CLIENT_RETRY_LIMIT`` times (default
  10, Claude Code's own default); the client does not retry on its own and the gateway already made
  a non-zero ``GATEWAY_MAX_RETRIES`` for it. ``true`` otherwise.

Worst case per prompt, for a client making ``R`` retries of its own:
``sum(1 + max(0, K - n) for n in range(min(R, L) + 1))`` upstream attempts when it honours
``x-should-retry`` (``L`` the limit), ``R + 1 + K(K + 1) / 2`` when it does not (Claude Code 2.1.197
retries a 529 whatever the header says): 4 for the SDK's defaults, 12 for Claude Code's,
``1 + GATEWAY_MAX_RETRIES`` for a client that does not retry.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final

from gateway.headers import header_value
from gateway.retry import BACKOFF_CAP_S, INITIAL_DELAY_S, RetryPolicy, RetryResult, Stop, parse_retry_after
from gateway.retry_memory import Recalled

RETRY_COUNT_HEADER: Final = "x-stainless-retry-count"
MAX_CLIENT_RETRY_COUNT: Final = 1000  # a larger "retry count" is not a real client's


@dataclass(frozen=True, slots=True)
class ClientRetries:
    """Which attempt of its client a request is, and what the earlier ones cost."""

    count: int | None
    """0 for a first attempt, n for the client's n-th retry; ``None``: a client that neither
    announces retries nor has repeated a request that just failed."""
    announced: bool = True
    """The client sends ``x-stainless-retry-count``: it retries on its own."""
    recalled: Recalled | None = None
    """The gateway's memory of this request's earlier failed attempts, if any."""

    @classmethod
    def from_headers(
        cls, headers: Iterable[tuple[str, str]], recalled: Recalled | None = None
    ) -> ClientRetries:
        value = header_value(headers, RETRY_COUNT_HEADER)
        count: int | None = None
        if value is not None:
            try:
                count = int(value.strip())
            except ValueError:
                count = None
            if count is not None and not 0 <= count <= MAX_CLIENT_RETRY_COUNT:
                count = None
        repeats = 0 if recalled is None else recalled.failures
        if count is None:
            return cls(repeats or None, announced=False, recalled=recalled)
        return cls(max(count, repeats), announced=True, recalled=recalled)


def _retries_for_attempt(policy: RetryPolicy, attempt: int) -> int:
    allowed = min(policy.client_retrying_max_retries, policy.max_retries)
    return max(0, allowed - attempt)


def gateway_retries(policy: RetryPolicy, client: ClientRetries) -> int:
    """The retries the gateway may make for this request."""
    if client.count is None:
        return policy.max_retries
    return _retries_for_attempt(policy, client.count)


def prior_attempts(policy: RetryPolicy, client: ClientRetries) -> int:
    """Upstream attempts this prompt has already cost: remembered, else at most each earlier attempt's
    full budget (a retry routed to another replica)."""
    if client.recalled is not None:
        return client.recalled.upstream_attempts
    if client.count is None:
        return 0
    return sum(1 + _retries_for_attempt(policy, n) for n in range(client.count))


def policy_for(policy: RetryPolicy, client: ClientRetries) -> RetryPolicy:
    """The policy for one request: its budget, and the overloads its client already met (for the
    model fallback, which would otherwise never see three in a row with a budget of one retry)."""
    overloads = 0 if client.recalled is None else client.recalled.overloads
    max_retries = gateway_retries(policy, client)
    if max_retries == policy.max_retries and overloads == 0:
        return policy  # the usual case: a first attempt with nothing remembered (frozen: shared)
    return dataclasses.replace(
        policy, max_retries=max_retries, prior_overloads=policy.prior_overloads + overloads
    )


def client_should_retry(policy: RetryPolicy, client: ClientRetries, attempt: RetryResult[Any]) -> bool:
    """Whether another client attempt is worth making after this final error (see module doc)."""
    if attempt.stop in (Stop.REFUSED, Stop.DEADLINE):
        return False
    if not client.announced and policy.max_retries > 0:
        return False  # the gateway did the retrying for this client, as much as it may
    return (client.count or 0) < policy.client_retry_limit


def suggested_delay(
    policy: RetryPolicy, client: ClientRetries, retries: int, rng: Callable[[], float] = random.random
) -> float:
    """The gateway's back-off before the client's next attempt, when the upstream gave no hint."""
    spent = prior_attempts(policy, client) + retries
    base = min(INITIAL_DELAY_S * 2.0 ** min(spent, 16), BACKOFF_CAP_S, policy.max_delay_s)
    return base * (1 - 0.25 * rng())


def final_headers(
    policy: RetryPolicy,
    client: ClientRetries,
    attempt: RetryResult[Any],
    upstream_headers: list[tuple[str, str]],
    rng: Callable[[], float] = random.random,
) -> dict[str, str]:
    """Headers for the client on a final retryable error (empty for other outcomes).

    ``policy`` is the deployment's policy (not the per-request one of ``policy_for``).
    """
    if attempt.stop is Stop.DONE:
        return {}
    headers = {"x-should-retry": "true" if client_should_retry(policy, client, attempt) else "false"}
    if attempt.stop is Stop.REFUSED:
        return headers  # the upstream's own hints, if any, are relayed as they are
    millis = header_value(upstream_headers, "retry-after-ms")
    seconds = header_value(upstream_headers, "retry-after")
    if millis is None and seconds is None:
        delay = suggested_delay(policy, client, attempt.retries, rng)
        headers["retry-after-ms"] = str(max(1, round(delay * 1000)))
        headers["retry-after"] = str(math.ceil(delay))
    elif seconds is None:
        asked = parse_retry_after([("retry-after-ms", millis or "")])
        headers["retry-after"] = str(math.ceil(asked) if asked is not None else 0)
    return headers
