"""Relaying an upstream answer to the client, observing usage on the way.

Streams are passed through chunk by chunk as they arrive (never buffered); the observer parses
only what metrics need. A stream that breaks or ends without a terminal event is closed with a
well-formed SSE ``error`` event, so a client never sees a 200 that just stops.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web

from gateway.errors import error_type_for_status
from gateway.providers.base import ClientRequest, UpstreamResponse
from gateway.streaming.sse import encode_event
from gateway.streaming.usage import StreamObserver, Usage, usage_from_message

log = logging.getLogger("switchyard.relay")


@dataclass(slots=True)
class Outcome:
    """What happened to one request, for metrics and the access log."""

    status: int = 0
    usage: Usage = field(default_factory=Usage)
    stop_reason: str | None = None
    error_type: str | None = None
    first_content_at: float | None = None
    upstream_request_id: str | None = None
    client_disconnected: bool = False


async def relay_stream(
    request: web.Request,
    client: ClientRequest,
    upstream: UpstreamResponse,
    extra_headers: dict[str, str],
    outcome: Outcome,
) -> web.StreamResponse:
    response = web.StreamResponse(status=upstream.status)
    for name, value in upstream.headers:
        response.headers.add(name, value)
    response.headers.update(extra_headers)
    await response.prepare(request)
    observer = StreamObserver(clock=time.monotonic)
    outcome.status = upstream.status
    try:
        async for chunk in upstream.iter_chunks():
            observer.feed(chunk)
            await response.write(chunk)
    except (ConnectionResetError, aiohttp.ClientConnectionResetError):
        # The client went away: nothing more to send, the upstream connection is dropped.
        outcome.client_disconnected = True
        _finish(outcome, observer)
        return response
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        log.warning(
            "upstream stream broke: request_id=%s model=%s error=%s",
            client.request_id,
            client.model,
            type(exc).__name__,
        )
        await _end_with_error(response, "api_error", "upstream connection lost mid-stream", outcome)
        _finish(outcome, observer)
        return response
    if not observer.finished:
        await _end_with_error(response, "api_error", "upstream stream ended before message_stop", outcome)
    _finish(outcome, observer)
    try:
        await response.write_eof()
    except (ConnectionResetError, aiohttp.ClientConnectionResetError):
        outcome.client_disconnected = True
    return response


async def _end_with_error(
    response: web.StreamResponse, error_type: str, message: str, outcome: Outcome
) -> None:
    outcome.error_type = error_type
    event = encode_event("error", {"type": "error", "error": {"type": error_type, "message": message}})
    try:
        await response.write(event)
    except (ConnectionResetError, aiohttp.ClientConnectionResetError):
        outcome.client_disconnected = True


def _finish(outcome: Outcome, observer: StreamObserver) -> None:
    outcome.usage = observer.usage
    outcome.stop_reason = observer.stop_reason
    outcome.first_content_at = observer.first_content_at
    if outcome.error_type is None:
        outcome.error_type = observer.error_type


async def relay_buffered(
    upstream: UpstreamResponse,
    extra_headers: dict[str, str],
    outcome: Outcome,
    *,
    observe_usage: bool,
) -> web.Response:
    body = await upstream.read()
    outcome.status = upstream.status
    if upstream.status == 200 and observe_usage:
        outcome.usage, outcome.stop_reason = usage_from_message(body)
    elif upstream.status >= 400:
        outcome.error_type = error_type_for_status(upstream.status)
    response = web.Response(status=upstream.status, body=body)
    for name, value in upstream.headers:
        response.headers.add(name, value)
    response.headers.update(extra_headers)
    return response
