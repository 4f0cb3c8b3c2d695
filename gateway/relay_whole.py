"""Relaying a whole upstream answer (non-streaming, count_tokens, errors) as one response.

The body is read within the body bounds (:func:`gateway.upstream_body.read_answer`) and passed on
as it came; a non-streaming Message's usage is observed for accounting, an error's type kept.
"""

from __future__ import annotations

from aiohttp import web

from gateway.errors import GatewayError, error_type_of
from gateway.outcome import Outcome
from gateway.providers.base import UpstreamResponse
from gateway.streaming.usage import usage_from_message
from gateway.upstream_body import read_answer


async def relay_buffered(
    upstream: UpstreamResponse,
    extra_headers: dict[str, str],
    outcome: Outcome,
    *,
    observe_usage: bool,
) -> web.Response:
    """``upstream``'s whole answer as one response; ``read_answer``'s 502 when it cannot be read,
    and a 502 for a 200 whose body is not a JSON object (the error type in ``outcome``,
    ``extra_headers`` on the error). ``observe_usage``: a Messages answer, its usage accounted."""
    try:
        body = await read_answer(upstream)
    except GatewayError as exc:
        outcome.error_type = exc.error_type
        for name, value in extra_headers.items():
            exc.headers.setdefault(name, value)
        raise
    if 200 <= upstream.status < 300:
        # a proxy's login page, an empty body, a 204: a success the client cannot use (every
        # answer relayed here, a Message, a token count or a model list, is a JSON object)
        observed = usage_from_message(body) if observe_usage else None
        if observed is None and (observe_usage or usage_from_message(body) is None):
            what = "a Message" if observe_usage else "a JSON object"
            message = f"upstream answered {upstream.status} with a body that is not {what}"
            refused = GatewayError(502, message, should_retry=True)
            outcome.error_type = refused.error_type
            refused.headers.update(extra_headers)
            raise refused
        if observed is not None:
            outcome.usage, outcome.stop_reason = observed
    outcome.status = upstream.status
    if upstream.status >= 400:
        outcome.error_type = error_type_of(body, upstream.status)  # the upstream's own word
    response = web.Response(status=upstream.status, body=body, headers=upstream.headers)  # copied in C
    response.headers.update(extra_headers)
    return response
