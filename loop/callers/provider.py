"""The default model caller: the gateway's provider layer, in process.

The request goes through the same code the gateway server uses upstream (the provider's one
preparation step, then the bounded ``with_retry`` loop with the deployment's retry policy, every
attempt sending the same prepared request), so the loop runs on Anthropic,
Bedrock, Vertex or Foundry by environment alone (``Settings.from_environ``). Each retry wait and
model fallback is yielded as a ``StatusEvent``. Streams get the server's protections too (see
``StreamGuard``, applied by the guard module the server's relay uses, ``gateway.streaming.guard``):
an idle watchdog whose warnings are status events, and one non-streaming retry, replayed as events,
when a stream fails before any content. The provider is started once (on the first call,
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

import orjson

from gateway.config import Settings
from gateway.errors import GatewayError, error_type_for_status
from gateway.headers import DEFAULT_ANTHROPIC_VERSION
from gateway.providers.base import ClientRequest, Operation, PreparedRequest, Provider, UpstreamResponse
from gateway.providers.factory import build_provider
from gateway.retry import ModelFallback, RetryPolicy, RetryResult, RetryStatus, with_retry
from gateway.streaming.guard import (
    GuardedReader,
    HoldBack,
    Idle,
    Recovery,
    StreamFailure,
    StreamSettings,
    ended_early,
    error_before_content,
    not_an_event_stream,
    recovery,
)
from gateway.streaming.replay import decoded_message, message_to_sse
from gateway.streaming.sse import SSEParser
from gateway.streaming.watchdog import IdleAction
from gateway.upstream_body import read_answer
from loop.callers.errors import error_event, error_event_from_body
from loop.deps import ModelStreamItem
from loop.events import StatusEvent
from loop.request import ModelRequest

USER_AGENT = "switchyard-loop/0.1"


def retry_policy(settings: Settings) -> RetryPolicy:
    """The retry policy the gateway server applies, from the same settings."""
    return RetryPolicy.from_settings(settings.resilience)


@dataclass(frozen=True, slots=True)
class StreamGuard:
    """The server's stream protections, applied in process: an idle watchdog (no data event for
    ``idle_warning_s`` is reported as a status event; for ``idle_timeout_s`` aborts the stream)
    and, when the stream fails before any content, one non-streaming retry replayed as events."""

    idle_warning_s: float = 45.0
    idle_timeout_s: float = 90.0
    nonstreaming_fallback: bool = True

    @property
    def settings(self) -> StreamSettings:
        """The shared guard's settings (no downstream pings: the loop has no idle connection)."""
        return StreamSettings(self.idle_warning_s, self.idle_timeout_s, math.inf, self.nonstreaming_fallback)

    @classmethod
    def from_settings(cls, settings: Settings) -> StreamGuard:
        resilience = settings.resilience
        return cls(
            resilience.stream_idle_warning_s,
            resilience.stream_idle_timeout_s,
            resilience.nonstreaming_fallback,
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
        try:
            prepared = self._provider.prepare(_client_request(request))  # once per call
        except GatewayError as exc:  # e.g. a model the upstream does not serve
            yield error_event(exc.error_type, exc.message, exc.status)
            return
        attempt: RetryResult[PreparedRequest] | None = None
        async for event in with_retry(
            self._provider.messages,
            prepared,
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
        self, response: UpstreamResponse, sent: PreparedRequest
    ) -> AsyncIterator[ModelStreamItem]:
        """The stream's events under the shared stream guard (``gateway.streaming.guard``); a
        failure before any content event becomes one non-streaming request replayed as events
        (the held-back ``message_start`` is dropped, so the loop sees one well-formed stream)."""
        if response.status != 200:
            yield error_event_from_body(response.status, await read_answer(response))  # 4xx/5xx: no raise
            return
        held: HoldBack[dict[str, Any]] = HoldBack()
        finished = False
        failure: StreamFailure | None = None
        try:
            if not response.is_event_stream:
                raise not_an_event_stream()
            reader = GuardedReader(response, self._guard.settings, clock=self._clock)
            parser = SSEParser()
            async with contextlib.aclosing(reader.read()) as items:
                async for item in items:
                    if isinstance(item, Idle):
                        if item.action is IdleAction.WARN:
                            yield StatusEvent(
                                "idle_warning", f"no data from the upstream for {item.silent_s:.0f}s"
                            )
                        continue
                    for event in parser.feed(item):
                        if event.event == "ping":
                            continue
                        reader.data_received(self._clock())
                        data = _decoded(event.data)
                        if not isinstance(data, dict):
                            continue
                        kind = data.get("type")
                        if kind == "error" and not held.content_forwarded:
                            raise _error_before_content(data)
                        final = kind in ("message_stop", "error")
                        finished = finished or final
                        content = kind in ("content_block_start", "content_block_delta")
                        for released in held.offer(data, content=content, final=final, size=len(event.data)):
                            yield released
            if not finished:
                raise ended_early()
        except StreamFailure as exc:
            failure = exc
        if failure is None:
            return
        decision = recovery(
            content_forwarded=held.content_forwarded,
            finished=finished,
            fallback_enabled=self._guard.nonstreaming_fallback and failure.fallback,
        )
        if decision is Recovery.ERROR_EVENT:
            yield error_event(failure.event_error_type, failure.reason)
            return
        if decision is Recovery.FAIL:
            yield error_event(failure.error_type, failure.reason, failure.status)
            return
        held.drop()
        response.close()
        yield StatusEvent("fallback", f"{failure.reason}: retrying once without streaming")
        try:
            answer = await self._provider.messages(sent.as_non_streaming())
        except GatewayError as exc:
            yield error_event(
                exc.error_type, f"{failure.reason}; non-streaming fallback failed: {exc.message}", exc.status
            )
            return
        try:
            body = await read_answer(answer)
        except GatewayError as exc:  # cut off, or too long
            yield error_event(
                exc.error_type, f"{failure.reason}; non-streaming fallback failed: {exc.message}", exc.status
            )
            return
        finally:
            answer.close()
        if answer.status != 200:
            yield error_event_from_body(answer.status, body)
            return
        message = decoded_message(body)
        if message is None:
            yield error_event("api_error", "non-streaming fallback gave no Message", 502)
            return
        parser = SSEParser()
        for frame in message_to_sse(message):
            for event in parser.feed(frame):
                if event.event != "ping":
                    yield orjson.loads(event.data)


def _error_before_content(event: dict[str, Any]) -> StreamFailure:
    """An ``error`` event before any content event (``guard.error_before_content``)."""
    error = event.get("error")
    kind = error.get("type") if isinstance(error, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    return error_before_content(
        kind if isinstance(kind, str) and kind else "api_error", message if isinstance(message, str) else ""
    )


def _decoded(data: str | bytes) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        raise StreamFailure("the upstream sent an event whose data is not JSON") from None


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
