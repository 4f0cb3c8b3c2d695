"""The default model caller: the gateway's provider layer, in process.

The request goes through the same code the gateway server uses upstream (the provider, then the
bounded ``with_retry`` loop with the deployment's retry policy), so the loop runs on Anthropic,
Bedrock, Vertex or Foundry by environment alone (``Settings.from_environ``). Each retry wait and
model fallback is yielded as a ``StatusEvent``. Streams get the server's protections too (see
``StreamGuard``): an idle watchdog whose warnings are status events, and one non-streaming retry,
replayed as events, when a stream fails before any content. The provider is started once (on the first call,
or explicitly) and closed by ``aclose``. SSE bytes are cut into events by the gateway's
``SSEParser`` and each ``data`` is decoded once.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import aiohttp
import orjson

from gateway.config import Settings
from gateway.errors import GatewayError, error_type_for_status
from gateway.headers import DEFAULT_ANTHROPIC_VERSION
from gateway.providers.base import ClientRequest, Operation, Provider, UpstreamResponse
from gateway.providers.factory import build_provider
from gateway.retry import Attempt, ModelFallback, RetryPolicy, RetryStatus, with_retry
from gateway.streaming.replay import message_to_sse
from gateway.streaming.sse import SSEParser
from gateway.streaming.watchdog import IdleAction, IdleWatchdog
from loop.callers.errors import error_event, error_event_from_body
from loop.deps import ModelStreamItem
from loop.events import StatusEvent
from loop.request import ModelRequest

USER_AGENT = "switchyard-loop/0.1"


def retry_policy(settings: Settings) -> RetryPolicy:
    """The retry policy the gateway server applies, from the same settings."""
    return RetryPolicy.from_settings(settings)


@dataclass(frozen=True, slots=True)
class StreamGuard:
    """The server's stream protections, applied in process: an idle watchdog (no data event for
    ``idle_warning_s`` is reported as a status event; for ``idle_timeout_s`` aborts the stream)
    and, when the stream fails before any content, one non-streaming retry replayed as events."""

    idle_warning_s: float = 45.0
    idle_timeout_s: float = 90.0
    nonstreaming_fallback: bool = True

    @classmethod
    def from_settings(cls, settings: Settings) -> StreamGuard:
        return cls(
            settings.stream_idle_warning_s, settings.stream_idle_timeout_s, settings.nonstreaming_fallback
        )


class ProviderModelCaller:
    def __init__(
        self,
        provider: Provider,
        *,
        policy: RetryPolicy | None = None,
        guard: StreamGuard | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._provider = provider
        self._policy = policy or RetryPolicy()
        self._guard = guard or StreamGuard()
        self._clock = clock
        self._sleep = sleep
        self._started = False
        self._lock = asyncio.Lock()

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> ProviderModelCaller:
        """The provider and retry policy the environment configures (``ConfigError`` if invalid)."""
        settings = Settings.from_environ(environ)
        return cls(
            build_provider(settings), policy=retry_policy(settings), guard=StreamGuard.from_settings(settings)
        )

    @property
    def provider(self) -> Provider:
        return self._provider

    async def start(self) -> None:
        async with self._lock:
            if not self._started:
                await self._provider.start()
                self._started = True

    async def aclose(self) -> None:
        async with self._lock:
            if self._started:
                self._started = False
                await self._provider.close()

    async def __aenter__(self) -> ProviderModelCaller:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def __call__(self, request: ModelRequest) -> AsyncIterator[ModelStreamItem]:
        await self.start()
        attempt: Attempt | None = None
        async for event in with_retry(
            self._provider.messages,
            _client_request(request),
            self._policy,
            refresh_credentials=self._provider.refresh_credentials,
            sleep=self._sleep,
        ):
            if isinstance(event, RetryStatus):
                yield _retry_status(event)
            elif isinstance(event, ModelFallback):
                yield StatusEvent(
                    "fallback", f"{event.from_model} is overloaded: falling back to {event.to_model}"
                )
            else:
                attempt = event
        if attempt is None or attempt.response is None:
            error = attempt.error if attempt is not None else None
            if error is None:
                yield error_event("api_error", "the upstream gave no response")
            else:
                yield error_event(error.error_type, error.message, error.status)
            return
        response = attempt.response
        try:
            async for item in self._guarded_events(response, attempt.request):
                yield item
        finally:
            response.close()

    async def _guarded_events(
        self, response: UpstreamResponse, sent: ClientRequest
    ) -> AsyncIterator[ModelStreamItem]:
        """The stream's events under the idle watchdog; a failure before any content event
        becomes one non-streaming request replayed as events (the held-back ``message_start``
        is dropped, so the loop sees one well-formed stream)."""
        if response.status != 200:
            yield error_event_from_body(response.status, await response.read())
            return
        held: list[ModelStreamItem] = []
        content = False
        failure: str | None = None
        if not response.is_event_stream:
            failure = "the upstream answered a streaming request without a stream"
        else:
            async for item in _watched_events(response, self._guard, self._clock):
                if isinstance(item, _Failure):
                    failure = item.reason
                    break
                if isinstance(item, StatusEvent):
                    yield item
                    continue
                kind = item.get("type")
                if not content and kind in ("content_block_start", "content_block_delta"):
                    content = True
                if not content and kind not in ("message_stop", "error"):
                    held.append(item)
                    continue
                for earlier in held:
                    yield earlier
                held.clear()
                yield item
        if failure is None:
            return
        if content or not self._guard.nonstreaming_fallback:
            yield error_event("api_error", failure)
            return
        response.close()
        yield StatusEvent("fallback", f"{failure}: retrying once without streaming")
        try:
            answer = await self._provider.messages(sent.as_non_streaming())
        except GatewayError as exc:
            yield error_event(
                exc.error_type, f"{failure}; non-streaming fallback failed: {exc.message}", exc.status
            )
            return
        try:
            body = await answer.read()
        finally:
            answer.close()
        if answer.status != 200:
            yield error_event_from_body(answer.status, body)
            return
        parser = SSEParser()
        for frame in message_to_sse(orjson.loads(body)):
            for event in parser.feed(frame):
                if event.event != "ping":
                    yield orjson.loads(event.data)


def _client_request(request: ModelRequest) -> ClientRequest:
    headers = [
        ("content-type", "application/json"),
        ("accept", "application/json"),
        ("anthropic-version", DEFAULT_ANTHROPIC_VERSION),
        ("user-agent", USER_AGENT),
    ]
    if request.betas:
        headers.append(("anthropic-beta", ",".join(request.betas)))
    return ClientRequest(
        operation=Operation.MESSAGES,
        body=orjson.dumps(request.body),
        payload=request.body,
        headers=headers,
        request_id=request.request_id,
    )


def _retry_status(event: RetryStatus) -> StatusEvent:
    status = (
        int(event.reason[7:]) if event.reason.startswith("status_") and event.reason[7:].isdigit() else None
    )
    return StatusEvent(
        "retry",
        f"retrying ({event.reason}) in {event.delay_s:.2f}s, attempt {event.attempt}",
        attempt=event.attempt,
        delay_s=event.delay_s,
        error_type=error_type_for_status(status) if status is not None else event.reason,
        status=status,
    )


@dataclass(frozen=True, slots=True)
class _Failure:
    reason: str


async def _watched_events(
    response: UpstreamResponse, guard: StreamGuard, clock: Callable[[], float]
) -> AsyncIterator[dict[str, Any] | StatusEvent | _Failure]:
    """Decoded events (pings skipped), idle warnings, and at most one failure, last."""
    now = clock()
    watchdog = IdleWatchdog(
        warn_after=guard.idle_warning_s,
        abort_after=guard.idle_timeout_s,
        ping_every=math.inf,
        last_data=now,
        last_write=now,
    )
    parser = SSEParser()
    chunks = response.iter_chunks().__aiter__()
    pending: asyncio.Future[bytes] | None = None
    finished = False
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(chunks.__anext__())
            done, _ = await asyncio.wait({pending}, timeout=max(watchdog.next_deadline() - clock(), 0.0))
            if not done:
                for action in watchdog.due(clock()):
                    silent = clock() - watchdog.last_data
                    if action is IdleAction.ABORT:
                        yield _Failure(f"upstream stream stalled: no data for {silent:.0f}s")
                        return
                    if action is IdleAction.WARN:
                        yield StatusEvent("idle_warning", f"no data from the upstream for {silent:.0f}s")
                continue
            try:
                chunk = pending.result()
            except StopAsyncIteration:
                break
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                yield _Failure(f"upstream connection lost mid-stream: {type(exc).__name__}")
                return
            finally:
                if pending.done():
                    pending = None
            for event in parser.feed(chunk):
                if event.event == "ping":
                    continue
                watchdog.data_received(clock())
                try:
                    data = orjson.loads(event.data)
                except orjson.JSONDecodeError:
                    yield _Failure("the upstream sent an event whose data is not JSON")
                    return
                if isinstance(data, dict):
                    finished = finished or data.get("type") in ("message_stop", "error")
                    yield data
        if not finished:
            yield _Failure("upstream stream ended before message_stop")
    finally:
        if pending is not None and not pending.done():
            pending.cancel()
            with contextlib.suppress(BaseException):
                await pending
