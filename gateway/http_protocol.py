"""aiohttp's HTTP/1 server protocol with the connection guard's phases, timers and JSON parser errors.

Malformed HTTP is answered as Anthropic-shaped JSON that never quotes the input, logged without a
traceback; keep the per-chunk bookkeeping to a compare and an addition.

Details: docs/internals/gateway.md
"""

from __future__ import annotations

import asyncio
import errno
import logging
import traceback
from collections.abc import Callable
from typing import Any, Final

from aiohttp import web
from aiohttp.http import HttpProcessingError, RawRequestMessage
from aiohttp.streams import StreamReader
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest
from aiohttp.web_server import Server

from gateway.connection_events import ConnectionEvents
from gateway.connections import ConnectionGuard, peer_key
from gateway.egress import scrub
from gateway.errors import GatewayError, error_body, error_type_for_status
from gateway.http_errors import ParseFailure, classify
from gateway.request_head import amend

log = logging.getLogger("switchyard.connections")

HEADERS: Final = 0  # the request's headers are arriving
BODY: Final = 1  # its body is arriving
BUSY: Final = 2  # it is complete and being answered
IDLE: Final = 3  # kept alive between requests

ACCEPT_RESOURCE_ERROR: Final = "socket.accept() out of system resource"  # asyncio's context message


class GuardedHandler(RequestHandler):
    """One client connection (see :mod:`gateway.connections` for the phases and what ends each)."""

    __slots__ = (
        "_body",
        "_body_start",
        "_failed",
        "_failure",
        "_guard",
        "_line_bytes",
        "_line_done",
        "_pending",
        "_phase",
        "_responded",
        "_since",
        "_timer",
        "counted",
        "peer",
    )

    def __init__(self, manager: Server, *, guard: ConnectionGuard, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._guard = guard
        self._phase = HEADERS
        self._since = self._loop.time()
        self._timer: asyncio.TimerHandle | None = None
        self._body: StreamReader | None = None
        self._body_start = 0  # body bytes already read when the body's clock (``_since``) started
        self._line_bytes = 0  # bytes of the current request line seen so far
        self._line_done = False
        self._responded = False  # the latest request parsed has been answered
        self._failed: tuple[StreamReader, BaseException] | None = None  # a body we failed ourselves
        self._failure: tuple[BaseException, ParseFailure] | None = None  # classified at parse time
        self._pending: bytes | None = None  # the answer of a connection shed before it was handed over
        self.counted = True  # still counted by the guard (not shed, not lost)
        self.peer: str | bytes | None = None  # the client address the per-IP cap counts it under
        guard.admit(self)  # at accept time: may shed older connections, or this one

    # -- lifecycle -------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        if not self.counted:  # shed or refused between the accept and now
            self._write_and_close(self._pending)
            return
        guard = self._guard
        if guard.per_ip:
            key = peer_key(transport.get_extra_info("peername"))
            # admitting may shed an older connection of this address, or refuse this one
            if key is not None and not guard.admit_peer(self, key):
                return
        self._headers_deadline()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._cancel_timer()
        self._guard.forget(self)
        failed = self._failed
        super().connection_lost(exc)  # fails the request's body with ConnectionResetError...
        if failed is not None:  # ...but a body we failed first keeps our error (its handler answers it)
            failed[0].set_exception(failed[1])

    def data_received(self, data: bytes) -> None:
        if data and self._phase >= BUSY and not (self._close or self._force_close):
            self._request_begins()
        if not self._line_done and data and self._phase == HEADERS:
            newline = data.find(b"\n")
            self._line_done = newline >= 0
            self._line_bytes += newline if newline >= 0 else len(data)
        count = self._request_count
        super().data_received(data)
        if self._request_count != count:
            self._amend(self._request_count - count)
            self._parsed()
        elif self._phase == BODY:
            body = self._body
            if body is not None and body.is_eof():
                self._body_done()

    async def finish_response(
        self, request: BaseRequest, resp: web.StreamResponse, start_time: float | None
    ) -> tuple[web.StreamResponse, bool]:
        try:
            return await super().finish_response(request, resp, start_time)
        finally:
            self._responded = True
            if self._phase == BUSY and not self._messages:
                self._phase = IDLE
                self._guard.now_idle(self)
            elif self._phase == HEADERS:  # a pipelined request began during this answer: its turn now
                self._since = self._loop.time()
                self._headers_deadline()

    # -- phases ----------------------------------------------------------------------------------
    def _request_begins(self) -> None:
        self._phase = HEADERS
        self._since = self._loop.time()
        self._line_bytes, self._line_done = 0, False
        self._guard.incomplete_again(self)
        self._headers_deadline()

    def _headers_deadline(self) -> None:
        """The headers are due ``GATEWAY_HEADER_TIMEOUT_S`` from ``_since``. aiohttp's own idle timer
        (armed at the accept and after each answer) is pushed past that deadline: it would close a
        connection whose request is arriving silently, where the header timeout answers ``408``."""
        due = self._since + self._guard.limits.header_timeout_s
        self._next_keepalive_close_time = due + self._keepalive_timeout
        self._due(due)

    def _parsed(self) -> None:
        """aiohttp queued a request (or a parser error) in this chunk: its headers are complete."""
        if not self._messages:
            return
        message, payload = self._messages[-1]
        if not isinstance(message, RawRequestMessage):  # a parser error, answered by handle_error
            exc: BaseException | None = getattr(message, "exc", None)
            failure = classify(exc, request_line_complete=self._line_done and not self._line_too_long())
            body = self._body
            if self._phase == BODY and body is not None and not body.is_eof():
                # the body of a request already being answered is malformed: fail it (its handler
                # answers the JSON error) rather than queue a second answer behind it
                self._messages.pop()
                self._guard.events.parse_error(failure.kind, failure.status)
                self._fail_body(body, GatewayError(failure.status, failure.message, should_retry=False))
                return
            if exc is not None:
                self._failure = (exc, failure)
            self._complete()
            return
        self._responded = False
        if payload.is_eof():  # no body, or all of it came with the headers
            self._body = None
            self._complete()
            return
        self._phase = BODY
        self._body, self._body_start = payload, payload.total_bytes
        self._since = self._loop.time()
        self._due(self._since + self._guard.limits.body_timeout_s)

    def _amend(self, new: int) -> None:
        """Amend the ``new`` requests this chunk queued (Expect; TE on HTTP/1.0): pipelined, one
        chunk can hold several, and each is served as amended, not only the last."""
        messages, limit = self._messages, self._guard.limits.max_body_bytes
        for index in range(max(len(messages) - new, 0), len(messages)):
            message, payload = messages[index]
            if isinstance(message, RawRequestMessage):
                amended = amend(message, limit)
                if amended is not message:
                    messages[index] = (amended, payload)

    def _line_too_long(self) -> bool:
        return self._line_bytes > self.max_line_size

    def _complete(self) -> None:
        self._phase = BUSY
        self._guard.complete(self)

    def _body_done(self) -> None:
        self._body = None
        if self._responded and not self._request_in_progress and not self._messages:
            self._phase = IDLE  # a body read after an early answer (aiohttp's lingering read)
            self._guard.now_idle(self)
        else:
            self._complete()

    # -- the deadline timer ----------------------------------------------------------------------
    # One timer per connection, re-armed lazily: a phase that ends does not cancel it (a timer that
    # fires in a phase without a deadline just ends), and a new deadline arms it only when it is not
    # already due earlier. A keep-alive connection serving requests back to back thus schedules about
    # one timer per header timeout, not one per request.
    def _due(self, deadline: float) -> None:
        timer = self._timer
        if timer is not None:
            if timer.when() <= deadline:
                return
            timer.cancel()
        self._timer = self._loop.call_at(deadline, self._check)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _check(self) -> None:
        self._timer = None
        if self.transport is None or not self.counted:
            return
        if self._phase == HEADERS:
            self._check_headers()
        elif self._phase == BODY:
            self._check_body()

    def _check_headers(self) -> None:
        due = self._since + self._guard.limits.header_timeout_s
        if self._loop.time() < due:
            self._due(due)
            return
        if self._request_in_progress or self._messages:  # pipelined: due again after that answer
            return
        guard = self._guard
        guard.forget(self)
        guard.events.connection_closed("header_timeout")
        self._write_and_close(guard.header_timeout_response)

    def _check_body(self) -> None:
        body = self._body
        if body is None:
            return
        limits = self._guard.limits
        now = self._loop.time()
        if self._reading_paused or self._buffer_paused:  # the gateway is not reading: not the client's delay
            self._since, self._body_start = now, body.total_bytes
            self._due(now + limits.body_timeout_s)
            return
        deadline = self._since + limits.body_timeout_s
        if limits.body_min_rate:
            # the body's own bytes, as parsed: chunk framing and extensions earn no time
            deadline += (body.total_bytes - self._body_start) / limits.body_min_rate
        if now < deadline:
            self._due(deadline)
            return
        self._guard.events.connection_closed("body_timeout")
        rate = f" (at least {limits.body_min_rate} bytes/s after {limits.body_timeout_s:g}s)"
        message = "request body not received in time" + (rate if limits.body_min_rate else "")
        self._fail_body(body, GatewayError(408, message, error_type="timeout_error"))

    # -- ending a connection ---------------------------------------------------------------------
    def _fail_body(self, body: StreamReader, error: GatewayError) -> None:
        """Answer the request whose body is ``body`` with ``error``, then close the connection."""
        self._cancel_timer()
        self._body = None
        self._complete()
        error.headers.setdefault("connection", "close")
        self._lingering_time = 0.0  # no lingering read of a body that failed
        self.close()  # no request after this one
        if self._responded and not self._request_in_progress:  # answered already: a lingering read
            body.feed_eof()
            self.force_close()
            return
        self._failed = (body, error)
        body.set_exception(error)

    def shed(self, answer: bytes) -> None:
        """Close this connection to make room (the guard no longer counts it); ``answer`` is written
        first when no request of it was complete."""
        self._cancel_timer()
        quiet = self._request_in_progress or bool(self._messages)  # an answer may be on the wire
        response = answer if self._phase == HEADERS and not quiet else None
        if self.transport is None:  # accepted but not handed over yet: closed in connection_made
            self._pending = response
            return
        body = self._body
        if self._phase == BODY and body is not None:
            self._fail_body(body, GatewayError(503, "connection shed under load", error_type="overloaded_error"))
        self._write_and_close(response)

    def _write_and_close(self, response: bytes | None) -> None:
        transport = self.transport
        if response is not None and transport is not None and not transport.is_closing():
            transport.write(response)
        self.force_close()

    # -- aiohttp's error answers -----------------------------------------------------------------
    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        """A JSON answer in place of aiohttp's text/plain one; nothing of the input in it or the log."""
        if request.writer.output_size > 0:  # as aiohttp: an answer is partly sent, the connection is broken
            raise ConnectionError("Response is sent already, cannot send another response")
        if isinstance(exc, HttpProcessingError):
            failure = self._failure[1] if self._failure and self._failure[0] is exc else None
            failure = failure or classify(exc, request_line_complete=True)
            self._guard.events.parse_error(failure.kind, failure.status)
            response = web.Response(
                status=failure.status,
                body=failure.body(),
                content_type="application/json",
                headers={"x-should-retry": "false"},
            )
        else:
            if exc is not None:
                trace = scrub("".join(traceback.format_exception(exc)))
                log.error("unhandled error answering %s %s: %s", request.method, request.path, trace)
            text = "the request timed out" if status == 504 else "internal gateway error"
            response = web.Response(
                status=status, body=error_body(error_type_for_status(status), text), content_type="application/json"
            )
        response.force_close()
        return response


class GuardedServer(Server):
    """aiohttp's low-level server whose connections are :class:`GuardedHandler`s of one guard."""

    guard: ConnectionGuard

    def __call__(self) -> RequestHandler:
        return GuardedHandler(self, loop=self._loop, guard=self.guard, **self._kwargs)


class GuardedRunner(web.AppRunner):
    """``AppRunner`` serving through :class:`GuardedServer`, with the guard's aiohttp limits."""

    __slots__ = ("_guard",)

    def __init__(self, app: web.Application, guard: ConnectionGuard, **kwargs: Any) -> None:
        super().__init__(app, **{**guard.limits.handler_args(), **kwargs})
        self._guard = guard

    async def _make_server(self) -> Server:
        server = await super()._make_server()  # the app's start-up, then aiohttp's own server
        guarded = GuardedServer.__new__(GuardedServer)
        guarded.__dict__.update(vars(server))  # the same server, making guarded handlers
        guarded.guard = self._guard
        return guarded


def watch_accept_errors(loop: asyncio.AbstractEventLoop, events: ConnectionEvents) -> Callable[[], None]:
    """Count asyncio's accept() resource errors (EMFILE...) as rate-limited warnings instead of one
    ERROR traceback per failed accept; returns the function that restores the previous handler."""
    previous = loop.get_exception_handler()

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if context.get("message") == ACCEPT_RESOURCE_ERROR and isinstance(exc, OSError):
            events.accept_error(errno.errorcode.get(exc.errno or 0, "other"))
            return
        if previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handler)
    return lambda: loop.set_exception_handler(previous)
