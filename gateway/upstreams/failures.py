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

UNSERVABLE = "unservable"  # the reason of an upstream that cannot serve the request (not a failure)


def failover_reason(attempt: RetryResult[PreparedRequest]) -> str | None:
    """Why the request should move on from this upstream, or ``None`` to answer with this outcome."""
    if attempt.error is not None:
        if isinstance(attempt.error, ClientInputError):
            return None
        return status_reason(attempt.error.status, gateway_made=True)
    if attempt.response is not None:
        return status_reason(attempt.response.status, gateway_made=False)
    return None  # pragma: no cover - a RetryResult holds one or the other


def stream_failover_reason(failure: StreamFailure) -> str | None:
    """The failover reason of a stream that failed before its first content event, read from the
    status its failure stands for (a cut is the gateway's 502, a stall its 504)."""
    return status_reason(failure.status, gateway_made=True)


def status_reason(status: int, *, gateway_made: bool) -> str | None:
    """The reason a status moves a request on (``None``: answer it). ``gateway_made``: the status
    is the gateway's own word for a failure on the way (502 connection, 504 timeout), not an
    upstream's answer (whose 502/504 are ``status_5xx``)."""
    if status in (401, 403):  # the gateway's own credential for this upstream is refused or unobtainable
        return "credentials"
    if status == 501:  # not_supported: it answered that it cannot serve this request, not a failure
        return UNSERVABLE  # of its health (Bedrock's CountTokens for an inference profile)
    if status == 429:
        return "status_429"
    if status == 529:
        return "status_529"
    if gateway_made and status == 502:
        return "connection_error"
    if status == 408 or (gateway_made and status == 504):  # (408: the upstream's own request timeout)
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
