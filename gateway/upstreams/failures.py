"""Why a request leaves an upstream: the failover reason of an attempt's outcome (a status, a
connection failure, a timeout) or of a stream handed back before any content was sent.

The reasons are the ``reason`` label of ``gateway_upstream_failures_total`` and the move reasons.

Details: docs/internals/gateway-upstreams.md
"""

from __future__ import annotations

from gateway.accounting import RequestScope
from gateway.errors import ClientInputError
from gateway.providers.base import PreparedRequest
from gateway.retry import RetryResult
from gateway.streaming.guard import StreamFailure
from gateway.streaming.usage import Usage


def failover_reason(attempt: RetryResult[PreparedRequest]) -> str | None:
    """Why the request should move on from this upstream, or ``None`` to answer with this outcome."""
    if attempt.error is not None:
        status = attempt.error.status
        if isinstance(attempt.error, ClientInputError):
            return None
    elif attempt.response is not None:
        status = attempt.response.status
    else:  # pragma: no cover - a RetryResult holds one or the other
        return None
    if status in (401, 403):  # the gateway's own credential for this upstream is refused or unobtainable
        return "credentials"
    if status == 429:
        return "status_429"
    if status == 529:
        return "status_529"
    if attempt.error is not None and status == 502:
        return "connection_error"
    if attempt.error is not None and status == 504:
        return "timeout"
    if status >= 500:
        return "status_5xx"
    return None


def stream_failover_reason(failure: StreamFailure) -> str | None:
    """The failover reason of a stream that failed before its first content event, read from the
    status its failure stands for as ``failover_reason`` reads an answer's (``None``: answer it)."""
    status = failure.status
    if status in (401, 403):
        return "credentials"
    if status == 429:
        return "status_429"
    if status == 529:
        return "status_529"
    if status == 502:
        return "connection_error"
    if status == 504:
        return "timeout"
    return "status_5xx" if status >= 500 else None


def forget_stream(scope: RequestScope) -> None:
    """Drop what a stream handed back before content left on the request (its upstream, its
    ``message_start`` usage, its error, its idle events): the next upstream's answer is the
    request's, accounted once."""
    outcome = scope.outcome
    outcome.status, outcome.error_type, outcome.failure = 0, None, None
    outcome.usage, outcome.stop_reason, outcome.first_content_at = Usage(), None, None
    outcome.upstream, outcome.upstream_request_id, outcome.upstream_done_at = None, None, None
    outcome.idle_events.clear()
    outcome.nonstreaming_fallback = False
    scope.provider = scope.upstream_error = None
