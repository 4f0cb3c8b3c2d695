"""Bounded retries as an async generator: status events go into the request's event stream.

Nothing is retried without a bound (``max_retries`` and the request deadline). Every attempt sends
the same prepared request: never prepare per attempt. The policy (what is retried, delays, model
fallback) is in the design document.

Details: docs/internals/gateway.md
"""

from __future__ import annotations

import email.utils
import enum
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, Self, TypeVar

from gateway.errors import GatewayError
from gateway.headers import header_value
from gateway.providers.base import UpstreamResponse
from gateway.settings.resilience import ResilienceSettings
from gateway.values import value

INITIAL_DELAY_S = 0.5
BACKOFF_CAP_S = 8.0
RETRYABLE_STATUSES = frozenset({408, 409, 429, 529})


class Stop(enum.StrEnum):
    """Why ``with_retry`` stopped with the outcome it yields."""

    DONE = "done"  # a success, or a status no client retries (400, 404...)
    REFUSED = "refused"  # retrying cannot help: x-should-retry: false, or a non-retryable gateway error
    BUDGET = "budget"  # the retry budget of this request is spent
    DEADLINE = "deadline"  # the next wait would pass the request deadline


class Retryable(Protocol):
    """What the loop needs of a request: the client's model name, and the request for another."""

    @property
    def model(self) -> str: ...

    def with_model(self, model: str) -> Self: ...


R = TypeVar("R", bound=Retryable)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_retries: int = 10
    max_delay_s: float = 60.0
    deadline_s: float = 600.0
    fallback_model: str | None = None
    fallback_after_overloads: int = 3
    # clients that retry themselves (see gateway.retry_budget)
    client_retrying_max_retries: int = 1
    client_retry_limit: int = 10
    prior_overloads: int = 0  # consecutive 529s this prompt met before this request (its client's)
    # several upstreams, while other candidates remain: a wait longer than this (an upstream's
    # ``retry-after``) ends the retries at once, so the request moves on instead of waiting
    move_on_after_s: float | None = None

    @classmethod
    def from_settings(cls, resilience: ResilienceSettings) -> RetryPolicy:
        return cls(
            max_retries=resilience.max_retries,
            max_delay_s=resilience.max_retry_delay_s,
            deadline_s=resilience.request_deadline_s,
            fallback_model=resilience.fallback_model,
            fallback_after_overloads=resilience.fallback_after_overloads,
            client_retrying_max_retries=resilience.client_retrying_max_retries,
            client_retry_limit=resilience.client_retry_limit,
        )


@dataclass(frozen=True, slots=True)
class RetryStatus:
    """Emitted before waiting for the next attempt."""

    attempt: int  # the attempt about to be made (1 = first retry)
    reason: str  # "status_529", "connection_error", "timeout", "credential_refresh"...
    delay_s: float


@dataclass(frozen=True, slots=True)
class ModelFallback:
    """Emitted when consecutive overloads switch the request to the fallback model."""

    from_model: str
    to_model: str


@value
class RetryResult(Generic[R]):
    """The final outcome: a response to relay, or a gateway error to answer with."""

    response: UpstreamResponse | None
    error: GatewayError | None
    retries: int
    model_fallback: str | None
    request: R  # the request as last sent (after a model fallback)
    stop: Stop = Stop.DONE
    next_delay_s: float | None = None  # the wait before another attempt (the upstream's or backoff)
    overloads: int = 0  # consecutive 529s at the end (counting ``prior_overloads``)


RetryEvent = RetryStatus | ModelFallback | RetryResult[Any]


def parse_retry_after(headers: list[tuple[str, str]], now: Callable[[], float] = time.time) -> float | None:
    """Seconds the server asked us to wait, or ``None`` (``retry-after-ms`` wins)."""
    millis = header_value(headers, "retry-after-ms")
    if millis is not None:
        try:
            value = float(millis) / 1000
            if value > 0:
                return value
        except ValueError:
            pass
    after = header_value(headers, "retry-after")
    if after is None:
        return None
    try:
        value = float(after)
    except ValueError:
        try:
            parsed = email.utils.parsedate_to_datetime(after)
        except (TypeError, ValueError):
            return None
        value = float(parsed.timestamp()) - now()
    return value if value > 0 else None


def backoff_delay(retries_taken: int, rng: Callable[[], float] = random.random) -> float:
    """0.5 s doubling per retry, capped at 8 s, with up to 25% jitter downwards."""
    base: float = min(INITIAL_DELAY_S * 2.0**retries_taken, BACKOFF_CAP_S)
    return base * (1 - 0.25 * rng())


def client_would_retry(status: int) -> bool:
    """The SDKs retry these statuses unless told otherwise (providers.md section 5)."""
    return status in RETRYABLE_STATUSES or status >= 500


def _should_retry(status: int, headers: list[tuple[str, str]]) -> Stop | None:
    """``None`` when the answer is worth another attempt, else why not."""
    forced = header_value(headers, "x-should-retry")
    if forced == "true":
        return None
    if not client_would_retry(status):
        return Stop.DONE
    return Stop.REFUSED if forced == "false" else None


def _refused(error: GatewayError) -> Stop:
    """Why a gateway error that must not be retried ends the loop."""
    return Stop.REFUSED if client_would_retry(error.status) else Stop.DONE


@dataclass(slots=True)
class FirstAttempt:
    """The first attempt of a request, sent outside the retry loop: its answer or its error."""

    sent_at: float
    response: UpstreamResponse | None = None
    error: GatewayError | None = None


async def first_attempt(
    send: Callable[[R], Awaitable[UpstreamResponse]],
    request: R,
    policy: RetryPolicy,
    clock: Callable[[], float],
) -> RetryResult[R] | FirstAttempt | None:
    """The common case without the loop's machinery: the first attempt sent here; its final result
    when it succeeded, else what :func:`with_retry` goes on from (``first=``). ``None`` (nothing
    sent) when the request starts with a model fallback (the client's prompt met overloads)."""
    if (
        policy.prior_overloads >= policy.fallback_after_overloads
        and policy.fallback_model
        and request.model != policy.fallback_model
    ):
        return None
    attempt = FirstAttempt(clock())
    try:
        response = await send(request)
    except GatewayError as exc:
        attempt.error = exc
        return attempt
    if response.status < 400:
        return RetryResult(response, None, 0, None, request)
    attempt.response = response
    return attempt


async def with_retry(
    send: Callable[[R], Awaitable[UpstreamResponse]],
    request: R,
    policy: RetryPolicy,
    *,
    refresh_credentials: Callable[[], Awaitable[bool]] | None = None,
    sleep: Callable[[float], Awaitable[None]],
    clock: Callable[[], float] = time.monotonic,
    rng: Callable[[], float] = random.random,
    first: FirstAttempt | None = None,
) -> AsyncIterator[RetryStatus | ModelFallback | RetryResult[R]]:
    """The bounded retry loop of one request: status events, then its one final result.

    ``first``: the first attempt, already sent by the caller (:func:`first_attempt`) and not
    final: the loop goes on from its answer, the deadline counted from when it was sent."""
    deadline = (clock() if first is None else first.sent_at) + policy.deadline_s
    current = request
    retries = 0
    overloads = policy.prior_overloads
    refreshed = False
    switched_to: str | None = None
    while True:
        if first is None and (
            overloads >= policy.fallback_after_overloads
            and policy.fallback_model
            and switched_to is None
            and current.model != policy.fallback_model
        ):
            switched_to = policy.fallback_model
            yield ModelFallback(current.model, switched_to)
            try:
                current = current.with_model(switched_to)  # prepared once for the new model
            except GatewayError as exc:  # the fallback model cannot be served (a 404 before sending)
                yield RetryResult(None, exc, retries, switched_to, current, _refused(exc))
                return
            overloads = 0
        response: UpstreamResponse | None = None
        error: GatewayError | None = None
        try:
            if first is None:
                response = await send(current)
            else:  # the caller's first attempt: its answer (or its error, raised here)
                sent, first = first, None
                if sent.error is not None:
                    raise sent.error
                assert sent.response is not None
                response = sent.response
            status, headers = response.status, response.headers
        except GatewayError as exc:
            if not exc.retryable:
                yield RetryResult(None, exc, retries, switched_to, current, _refused(exc))
                return
            error = exc
            status, headers = exc.status, []
        if status < 400:
            yield RetryResult(response, None, retries, switched_to, current)
            return

        if status in (401, 403) and error is None and refresh_credentials is not None and not refreshed:
            refreshed = True
            assert response is not None
            try:
                renewed = await refresh_credentials()
            except GatewayError as failed:  # no new credential to be had: why is the answer, as any error
                response.close()
                yield RetryResult(None, failed, retries, switched_to, current, _refused(failed))
                return
            if renewed:
                response.close()
                yield RetryStatus(retries + 1, "credential_refresh", 0.0)
                retries += 1
                continue

        overloads = overloads + 1 if status == 529 else 0
        refusal = None if error is not None else _should_retry(status, headers)
        if refusal is not None:
            yield RetryResult(response, error, retries, switched_to, current, refusal, None, overloads)
            return
        asked = parse_retry_after(headers)
        delay = asked if asked is not None else backoff_delay(retries, rng)
        moving_on = policy.move_on_after_s is not None and delay > policy.move_on_after_s
        delay = min(delay, policy.max_delay_s)
        if retries >= policy.max_retries or moving_on:
            yield RetryResult(response, error, retries, switched_to, current, Stop.BUDGET, delay, overloads)
            return
        if clock() + delay > deadline:
            yield RetryResult(response, error, retries, switched_to, current, Stop.DEADLINE, delay, overloads)
            return

        if response is not None:
            response.close()
        reason = ("timeout" if status == 504 else "connection_error") if error else f"status_{status}"
        yield RetryStatus(retries + 1, reason, delay)
        await sleep(delay)
        retries += 1
