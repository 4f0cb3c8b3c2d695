"""The retry budget: the gateway shares retries with its client instead of stacking them.

A request's budget depends on which attempt of its client it is (``x-stainless-retry-count`` or
:mod:`gateway.retry_memory`); final errors carry ``retry-after`` and ``x-should-retry``. The
worst-case arithmetic is in the design document.

Details: docs/internals/gateway.md
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable, Iterable
from typing import Any, Final

from gateway.headers import RETRY_COUNT_HEADER, ClientHeaders, header_value
from gateway.retry import BACKOFF_CAP_S, INITIAL_DELAY_S, RetryPolicy, RetryResult, Stop, parse_retry_after
from gateway.retry_memory import Recalled
from gateway.values import value

MAX_CLIENT_RETRY_COUNT: Final = 1000  # a larger "retry count" is not a real client's
MAX_HINT_S: Final = 86_400.0  # a wait the client is told, at most (and at most the request deadline)
_HINTS: Final = ("retry-after-ms", "retry-after")


@value
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
        if isinstance(headers, ClientHeaders):  # found when the list was made
            value = headers.retry_count
        else:
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

    ``policy`` is the deployment's policy (not the per-request one of ``policy_for``). The wait is
    the upstream's hint (``retry-after-ms``, else ``retry-after`` in seconds or as an HTTP date),
    sent in both forms and at most the request deadline (the SDKs sleep up to 49 days on what they
    are told); a hint no client can use (negative, ``nan``, garbage, a past date) is replaced by
    the gateway's suggestion. With ``x-should-retry: false`` a wait is sent only to replace the
    upstream's own.
    """
    if attempt.stop is Stop.DONE:
        return {}
    headers = {"x-should-retry": "true" if client_should_retry(policy, client, attempt) else "false"}
    hinted = any(header_value(upstream_headers, name) is not None for name in _HINTS)
    if attempt.stop is Stop.REFUSED and not hinted:
        return headers
    asked = parse_retry_after(upstream_headers) if hinted else None
    if asked is None:
        delay = suggested_delay(policy, client, attempt.retries, rng)
    else:
        delay = min(asked, policy.deadline_s, MAX_HINT_S)
    headers["retry-after-ms"] = str(max(1, round(delay * 1000)))
    headers["retry-after"] = str(math.ceil(delay))
    return headers
