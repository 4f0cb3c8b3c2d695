"""Relaying an upstream stream to the client, observing usage on the way (whole answers:
:mod:`gateway.relay_whole`).

``StreamRelay`` passes a stream's chunks through unchanged, holds back what precedes the first
content event (so a stream failing before content is replaced by a non-streaming retry, or handed
back to the several-upstreams path to fail over), runs the idle watchdog and the write-stall bound,
and ends a broken or drained stream with an SSE ``error`` event: never a 200 without
``message_stop`` or ``error`` (README, "Resilience", has the rules).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

import aiohttp
from aiohttp import web

from gateway.drain import DRAIN_KEY, SHUTDOWN_MESSAGE
from gateway.errors import GatewayError, error_body, error_type_for_status
from gateway.outcome import Outcome
from gateway.providers.base import ClientRequest, UpstreamResponse
from gateway.streaming.guard import (
    DeadlinePassed,
    GuardedReader,
    HandBack,
    HandedBack,
    HoldBack,
    Idle,
    Recovery,
    StreamFailure,
    ended_early,
    error_before_content,
    not_an_event_stream,
    recovery,
)
from gateway.streaming.guard import StreamSettings as StreamSettings  # re-exported for the server
from gateway.streaming.replay import decoded_message, message_to_sse
from gateway.streaming.scan import MAX_EVENT_BYTES, events_end
from gateway.streaming.sse import PING_EVENT, encode_event
from gateway.streaming.usage import StreamObserver
from gateway.streaming.watchdog import IdleAction
from gateway.upstream_body import read_answer
from gateway.write_stall import WriteStall, stall_failure

log = logging.getLogger("switchyard.relay")

_CLIENT_GONE = (ConnectionResetError, aiohttp.ClientConnectionResetError)


class _EventStreamResponse(web.StreamResponse):
    """The client's stream response: its headers leave with the first body bytes (one write).

    The relay prepares the response only when it has bytes to send (``StreamRelay._write``) or is
    ending it, so holding the headers back never delays them. (aiohttp sends a prepared
    ``StreamResponse``'s headers at once by default, in a write of their own.)
    """

    _send_headers_immediately = False


class StreamRelay:
    """Relays one streaming answer to one client."""

    def __init__(
        self,
        request: web.Request,
        client: ClientRequest,
        outcome: Outcome,
        settings: StreamSettings,
        *,
        fallback: Callable[[], Awaitable[UpstreamResponse]] | None,
        on_idle: Callable[[IdleAction], None],
        clock: Callable[[], float] = time.monotonic,
        provider: str = "",
        hand_back: HandBack | None = None,
    ) -> None:
        self._provider = provider
        self._hand_back = hand_back  # until the stream commits (``_prepare``)
        self._request = request
        self._client = client
        self._outcome = outcome
        self._settings = settings
        self._fallback = fallback if settings.nonstreaming_fallback else None
        self._on_idle = on_idle
        self._clock = clock
        self._observer = StreamObserver(clock=clock)
        self._response: web.StreamResponse | None = None
        self._headers: list[tuple[str, str]] = []  # the upstream's
        self._extra: dict[str, str] = {}  # the gateway's own: they replace the upstream's of a name
        self._held: HoldBack[bytes] = HoldBack()
        self._upstream: UpstreamResponse | None = None
        self._stall: WriteStall | None = None
        self._partial = b""  # the start of an event, passed on once the event is complete

    async def run(self, upstream: UpstreamResponse, extra_headers: dict[str, str]) -> web.StreamResponse:
        # one coroutine frame from here to the reader (no ``_run``/``_pump`` frames): each wait for
        # an upstream chunk suspends and resumes every frame of the handler's await chain
        self._upstream = upstream
        bound = self._settings.write_stall_s
        if bound is not None:
            self._stall = WriteStall(bound, self._stalled)
        self._headers, self._extra = upstream.headers, extra_headers
        self._outcome.status = 200
        try:
            try:
                if not upstream.is_event_stream:
                    raise not_an_event_stream()
                # the drain deadline wakes a stream waiting on a slow upstream (see gateway.drain)
                drain = self._request.app.get(DRAIN_KEY)
                deadline = drain.open_watch() if drain is not None else None
                observer, outcome, held, clock = self._observer, self._outcome, self._held, self._clock
                feed, stall = observer.feed, self._stall
                reader = GuardedReader(upstream, self._settings, clock=clock, deadline=deadline)
                items = reader.read()
                try:
                    async for item in items:
                        if isinstance(item, Idle):
                            await self._idle(item, reader)
                            continue
                        started = clock()
                        data = feed(item)
                        now = clock()
                        outcome.relay_busy_s += now - started
                        if not held.content_forwarded:
                            if observer.error_before_content:
                                kind = observer.error_type or "api_error"
                                raise error_before_content(kind, observer.error_message)
                            if not await self._forward(item):
                                if data:
                                    reader.data_received(now)
                                continue
                        elif self._partial or observer.finished or not item.endswith(b"\n\n"):
                            await self._pass_on(item)
                        elif stall is None or (response := self._response) is None:
                            await self._write(item)
                        else:  # the usual chunk (whole events, more to come): ``_write``, inlined
                            stall.since = stall.now()
                            try:
                                await response.write(item)
                            finally:
                                stall.since = None
                        reader.progress(now, data)
                finally:
                    await items.aclose()  # as ``contextlib.aclosing`` does, without its frames
                    if drain is not None and deadline is not None:
                        drain.close_watch(deadline)
                if not self._observer.finished:
                    raise ended_early()
            except StreamFailure as failure:
                upstream.close()
                return await self._recover(failure)
            except DeadlinePassed:
                upstream.close()
                return await self._shut_down()
            except _CLIENT_GONE:
                self._outcome.client_disconnected = True
                upstream.close()
            finally:
                self._finish()
            return await self._end()
        finally:
            if self._stall is not None:
                self._stall.cancel()
                self._stall = None  # it holds ``self._stalled``: no cycle left for the collector

    async def _idle(self, idle: Idle, reader: GuardedReader) -> None:
        if idle.action is IdleAction.PING:
            # while another upstream may still take the request (a pending hand-back), nothing is
            # sent, not even a ping: a ping would commit this stream, and a stall before content
            # must stay free to move on (the client waits for headers, as for a slow first byte)
            if self._hand_back is None or self._response is not None:
                await self._write(PING_EVENT)
            reader.wrote(idle.at)
            return
        self._outcome.idle_events.append(idle.action.value)
        self._on_idle(idle.action)
        log.warning(
            "stream idle %s: no upstream data for %.1fs (x-client-request-id=%s provider=%s model=%s)",
            idle.action.value,
            idle.silent_s,
            self._client.request_id,
            self._provider,
            self._client.model,
        )

    async def _forward(self, chunk: bytes) -> bool:
        """Pass ``chunk`` on, or hold it back until the first content event. True if written."""
        observer = self._observer
        released = self._held.offer(
            chunk, content=observer.content_seen, final=observer.finished, size=len(chunk)
        )
        if not released:
            return False
        await self._pass_on(released[0] if len(released) == 1 else b"".join(released))
        return True

    async def _pass_on(self, data: bytes) -> None:
        """Write ``data``; when it ends a complete stream, with the end of the response (one write).

        Only whole events are passed on: the start of an unfinished event waits for the chunk that
        ends it (a chunk that ends between events, the usual case, is passed on as it is). A stream
        cut mid-event thus never leaves half an event at the client, in front of the error event
        that reports the cut. An event larger than ``MAX_EVENT_BYTES`` is passed on as it comes.
        """
        if self._partial:
            data, self._partial = self._partial + data, b""
        end = events_end(data)
        if end < len(data) and len(data) - end <= MAX_EVENT_BYTES:
            data, self._partial = data[:end], data[end:]
            if not data:
                return
        upstream = self._upstream
        if self._observer.finished and not self._partial and upstream is not None and upstream.ended():
            response = self._response
            if response is None:
                response = await self._prepare()
            if self._stall is not None:  # watched like ``_end``'s last write
                self._stall.since = self._stall.now()
            await response.write_eof(data)
        else:
            await self._write(data)

    # -- writing to the client --------------------------------------------------------------------
    async def _prepare(self) -> web.StreamResponse:
        if self._response is None:
            if (hand_back := self._hand_back) is not None:  # committed: bytes go to the client now
                self._hand_back = None
                await hand_back.on_commit()
            response = _EventStreamResponse(status=200)
            response.headers.extend(self._headers)
            response.headers.update(self._extra)  # (an upstream's x-client-request-id was sent first)
            if self._outcome.nonstreaming_fallback:
                response.headers["x-gateway-fallback"] = "non_streaming"
            await response.prepare(self._request)
            self._response = response
        return self._response

    async def _write(self, data: bytes) -> None:
        response = self._response
        if response is None:
            response = await self._prepare()
        stall = self._stall
        if stall is None:
            await response.write(data)
            return
        stall.since = stall.now()  # the write-stall bound watches this write (gateway.write_stall)
        try:
            await response.write(data)
        finally:
            stall.since = None

    async def _end(self) -> web.StreamResponse:
        response = await self._prepare()
        if not self._outcome.client_disconnected:
            if self._stall is not None:  # the last write, flushed; the bound is lifted after it
                self._stall.since = self._stall.now()
            # a complete stream's unterminated last bytes still reach the client
            tail, self._partial = self._partial, b""
            with contextlib.suppress(*_CLIENT_GONE):
                await response.write_eof(tail)
        return response

    def _stalled(self, waited_s: float) -> None:
        """A write waited the bound for a client that stopped reading: disconnect it. The handler
        then unwinds (cancelled, or its next write fails) and closes the upstream connection."""
        self._outcome.client_disconnected = True
        self._outcome.failure = stall_failure(waited_s)
        log.warning(
            "client stopped reading: closing its connection after a write waited %.1fs "
            "(x-client-request-id=%s provider=%s model=%s)",
            waited_s,
            self._client.request_id,
            self._provider,
            self._client.model,
        )
        transport = self._request.transport
        if transport is not None:
            transport.abort()

    async def _error_event(self, error_type: str, message: str) -> None:
        self._partial = b""  # a cut event is dropped: the error event follows whole events only
        self._outcome.error_type = error_type
        event = encode_event("error", {"type": "error", "error": {"type": error_type, "message": message}})
        try:
            await self._write(event)
        except _CLIENT_GONE:
            self._outcome.client_disconnected = True

    async def _shut_down(self) -> web.StreamResponse:
        """The drain deadline passed: end the stream well-formed rather than let the exit cut it.

        After content, an SSE ``overloaded_error`` event (the client's retry then goes to another
        replica); before any byte was sent, a plain 529 with the same error, which SDKs retry.
        """
        self._outcome.failure = "gateway shutting down"
        log.warning(
            "drain deadline passed: ending open stream (x-client-request-id=%s model=%s content_forwarded=%s)",
            self._client.request_id,
            self._client.model,
            self._held.content_forwarded,
        )
        return await self._fail_before_content(529, "overloaded_error", SHUTDOWN_MESSAGE)

    # -- recovery -----------------------------------------------------------------------------------
    async def _recover(self, failure: StreamFailure) -> web.StreamResponse:
        self._outcome.failure = failure.reason
        log.warning(
            "upstream stream failed: %s (x-client-request-id=%s provider=%s model=%s content_forwarded=%s)",
            failure.reason,
            self._client.request_id,
            self._provider,
            self._client.model,
            self._held.content_forwarded,
        )
        decision = recovery(
            content_forwarded=self._held.content_forwarded,
            finished=self._observer.message_stopped,  # (an error event before content is ``failure``)
            fallback_enabled=self._fallback is not None and failure.fallback,
        )
        hand_back = self._hand_back
        if hand_back is not None and self._response is None and hand_back.wanted(failure):
            raise HandedBack(failure)  # nothing was sent (not even a ping: ``_response`` is None)
        if decision is Recovery.ERROR_EVENT:
            await self._error_event(
                failure.event_error_type,
                f"{failure.reason}; the response was cut after content was sent, retry the request",
            )
            return await self._end()
        if decision is Recovery.FAIL:
            return await self._fail_before_content(failure.status, failure.error_type, failure.reason)
        return await self._replay_non_streaming(failure)

    async def _fail_before_content(self, status: int, error_type: str, message: str) -> web.StreamResponse:
        """Nothing reached the client yet: answer with a proper HTTP error, else an SSE error."""
        self._held.drop()
        if self._response is None:
            self._outcome.status = status
            self._outcome.error_type = error_type
            response = web.Response(status=status, body=error_body(error_type, message))
            response.headers.extend(self._headers)
            response.headers.update(self._extra)
            response.headers["content-type"] = "application/json"  # (replaces the upstream's)
            return response
        await self._error_event(error_type, message)
        return await self._end()

    async def _replay_non_streaming(self, failure: StreamFailure) -> web.StreamResponse:
        assert self._fallback is not None
        self._outcome.nonstreaming_fallback = True
        self._held.drop()
        self._observer = StreamObserver(clock=self._clock)
        try:
            answer = await self._fallback()
        except GatewayError as exc:
            return await self._fail_before_content(
                exc.status, exc.error_type, f"{failure.reason}; non-streaming fallback failed: {exc.message}"
            )
        try:
            body = await read_answer(answer)
        except GatewayError as exc:  # cut off, or too long
            return await self._fail_before_content(
                exc.status, exc.error_type, f"{failure.reason}; non-streaming fallback failed: {exc.message}"
            )
        finally:
            answer.close()
        if answer.status != 200:
            if self._response is None:  # relay the upstream's error as it is
                self._outcome.status = answer.status
                self._outcome.error_type = error_type_for_status(answer.status)
                response = web.Response(status=answer.status, body=body)
                for name, value in answer.headers:
                    response.headers.add(name, value)
                return response
            await self._error_event(error_type_for_status(answer.status), "non-streaming fallback failed")
            return await self._end()
        message = decoded_message(body)
        if message is None:  # not JSON, or JSON of another kind (``[]``, ``null``: a 500 before)
            return await self._fail_before_content(502, "api_error", "non-streaming fallback gave no Message")
        for frame in message_to_sse(message):
            self._observer.feed(frame)
            await self._write(frame)
        self._finish()
        return await self._end()

    def _finish(self) -> None:
        outcome, observer = self._outcome, self._observer
        outcome.usage = observer.usage
        outcome.stop_reason = observer.stop_reason
        outcome.first_content_at = observer.first_content_at
        if outcome.error_type is None:
            outcome.error_type = observer.error_type
