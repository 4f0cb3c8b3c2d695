"""The one interface every upstream provider presents to the server (and later the agent loop).

The server hands a provider a ``ClientRequest`` (the client's body bytes untouched, the parsed
payload, the forwardable headers) and gets back an ``UpstreamResponse`` whose body is already in
the Anthropic wire format: SSE for streams, Anthropic JSON otherwise. Everything provider-specific
(URL, auth, body shape, framing, error mapping) stays inside the provider, so nothing outside
``gateway/providers`` branches on which upstream is configured.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson


class Operation(enum.Enum):
    MESSAGES = "messages"
    COUNT_TOKENS = "count_tokens"


@dataclass(frozen=True, slots=True)
class ClientRequest:
    """What the client asked for, as the server received and parsed it."""

    operation: Operation
    body: bytes
    payload: Mapping[str, Any]
    headers: list[tuple[str, str]]
    request_id: str

    @property
    def stream(self) -> bool:
        return self.operation is Operation.MESSAGES and self.payload.get("stream") is True

    @property
    def model(self) -> str:
        model = self.payload.get("model")
        return model if isinstance(model, str) else ""

    def with_payload(self, payload: Mapping[str, Any]) -> ClientRequest:
        """The same request with a changed body, re-serialised deterministically (key order kept)."""
        return ClientRequest(
            operation=self.operation,
            body=orjson.dumps(payload),
            payload=payload,
            headers=self.headers,
            request_id=self.request_id,
        )

    def with_model(self, model: str) -> ClientRequest:
        """The request for another model. Thinking blocks carry signatures bound to the model that
        wrote them (replaying them to another model is a 400), so assistant turns lose them."""
        payload = {**self.payload, "model": model}
        messages = payload.get("messages")
        if isinstance(messages, list):
            payload["messages"] = [_without_thinking(m) for m in messages]
        return self.with_payload(payload)

    def as_non_streaming(self) -> ClientRequest:
        return self.with_payload({k: v for k, v in self.payload.items() if k != "stream"})


_THINKING = frozenset({"thinking", "redacted_thinking"})


def _without_thinking(message: Any) -> Any:
    if not isinstance(message, dict) or message.get("role") != "assistant":
        return message
    content = message.get("content")
    if not isinstance(content, list):
        return message
    kept = [b for b in content if not (isinstance(b, dict) and b.get("type") in _THINKING)]
    if len(kept) == len(content):
        return message
    return {**message, "content": kept or [{"type": "text", "text": ""}]}


class UpstreamResponse(ABC):
    """An upstream answer, already translated to the Anthropic wire format."""

    status: int
    headers: list[tuple[str, str]]
    is_event_stream: bool
    dropped_betas: tuple[str, ...] = ()  # betas the provider's policy removed from the request

    @abstractmethod
    def iter_chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives (SSE bytes for streams)."""

    @abstractmethod
    async def read(self) -> bytes:
        """The whole body."""

    @abstractmethod
    def close(self) -> None:
        """Release the connection (back to the pool when the body was fully read)."""


@dataclass(slots=True)
class BufferedResponse(UpstreamResponse):
    """A complete body held in memory (provider-made answers, translated errors)."""

    status: int
    body: bytes
    headers: list[tuple[str, str]] = field(default_factory=list)
    is_event_stream: bool = False

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        yield self.body

    async def read(self) -> bytes:
        return self.body

    def close(self) -> None:
        return None


class Provider(ABC):
    """One upstream. Implementations: ``anthropic`` (first party); cloud providers plug in here."""

    name: str

    @abstractmethod
    async def messages(self, request: ClientRequest) -> UpstreamResponse:
        """``POST /v1/messages``, streaming when ``request.stream``."""

    @abstractmethod
    async def count_tokens(self, request: ClientRequest) -> UpstreamResponse:
        """``POST /v1/messages/count_tokens``."""

    @abstractmethod
    async def list_models(self, headers: list[tuple[str, str]], query: str) -> UpstreamResponse:
        """``GET /v1/models``: what this deployment serves."""

    @abstractmethod
    def not_ready_reason(self) -> str | None:
        """``None`` when the provider can serve (credentials present), else why not."""

    async def readiness(self) -> str | None:
        """``/readyz``: like :meth:`not_ready_reason`, after retrying failing credentials if due."""
        return self.not_ready_reason()

    @abstractmethod
    def describe(self) -> dict[str, str]:
        """Non-secret facts for the start-up log: base URL, region, credential source."""

    async def start(self) -> None:  # noqa: B027 - optional hook
        """Open pools; called once inside the server's event loop."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Close pools."""

    async def refresh_credentials(self) -> bool:
        """Re-read or refresh the upstream credential after a 401/403; ``True`` if it changed.

        Static keys cannot be refreshed: the default answers ``False`` (no retry)."""
        return False
