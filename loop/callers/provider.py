"""The default model caller: the gateway's provider layer, in process.

The request goes through the same code the gateway server uses upstream (the provider, then the
bounded ``with_retry`` loop with the deployment's retry policy), so the loop runs on Anthropic,
Bedrock, Vertex or Foundry by environment alone (``Settings.from_environ``). Each retry wait and
model fallback is yielded as a ``StatusEvent``. The provider is started once (on the first call,
or explicitly) and closed by ``aclose``. SSE bytes are cut into events by the gateway's
``SSEParser`` and each ``data`` is decoded once.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from types import TracebackType

import aiohttp
import orjson

from gateway.config import Settings
from gateway.errors import error_type_for_status
from gateway.headers import DEFAULT_ANTHROPIC_VERSION
from gateway.providers.base import ClientRequest, Operation, Provider, UpstreamResponse
from gateway.providers.factory import build_provider
from gateway.retry import Attempt, ModelFallback, RetryPolicy, RetryStatus, with_retry
from gateway.streaming.sse import SSEParser
from loop.callers.errors import error_event, error_event_from_body
from loop.deps import ModelStreamItem
from loop.events import StatusEvent
from loop.request import ModelRequest

USER_AGENT = "switchyard-loop/0.1"


def retry_policy(settings: Settings) -> RetryPolicy:
    """The retry policy the gateway server applies, from the same settings."""
    return RetryPolicy(
        max_retries=settings.max_retries,
        max_delay_s=settings.max_retry_delay_s,
        deadline_s=settings.request_deadline_s,
        fallback_model=settings.fallback_model,
        fallback_after_overloads=settings.fallback_after_overloads,
    )


class ProviderModelCaller:
    def __init__(
        self,
        provider: Provider,
        *,
        policy: RetryPolicy | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._provider = provider
        self._policy = policy or RetryPolicy()
        self._sleep = sleep
        self._started = False
        self._lock = asyncio.Lock()

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> ProviderModelCaller:
        """The provider and retry policy the environment configures (``ConfigError`` if invalid)."""
        settings = Settings.from_environ(environ)
        return cls(build_provider(settings), policy=retry_policy(settings))

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
            async for item in _events(response):
                yield item
        finally:
            response.close()


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


async def _events(response: UpstreamResponse) -> AsyncIterator[ModelStreamItem]:
    if response.status != 200:
        yield error_event_from_body(response.status, await response.read())
        return
    if not response.is_event_stream:
        yield error_event("api_error", "the upstream answered a streaming request without a stream", 200)
        return
    parser = SSEParser()
    try:
        async for chunk in response.iter_chunks():
            for event in parser.feed(chunk):
                if event.event == "ping":
                    continue
                data = orjson.loads(event.data)
                if isinstance(data, dict):
                    yield data
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        yield error_event("api_error", f"upstream connection lost mid-stream: {type(exc).__name__}")
    except orjson.JSONDecodeError:
        yield error_event("api_error", "the upstream sent an event whose data is not JSON")
