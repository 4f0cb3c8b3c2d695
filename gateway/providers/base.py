"""The one interface every upstream provider presents to the server and to the loop's provider caller.

The server has a provider prepare a ``ClientRequest`` (the client's body bytes untouched, the
parsed payload, the forwardable headers) once into a ``PreparedRequest``, hands that to every
attempt, and gets back an ``UpstreamResponse`` whose body is already in the Anthropic wire format:
SSE for streams, Anthropic JSON otherwise. Everything provider-specific (URL, auth, body shape,
framing, error mapping) stays inside the provider, so nothing outside ``gateway/providers``
branches on which upstream is configured.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Final

from gateway.headers import header_value
from gateway.providers.model_listing import ModelListing
from gateway.providers.preparation import Framed, Preparer, Shaped
from gateway.providers.request import ClientRequest, Operation, PreparedRequest

__all__ = [
    "BufferedResponse",
    "ClientRequest",
    "Operation",
    "PreparedRequest",
    "Provider",
    "UpstreamResponse",
]

JSON_HEADERS: Final = (("content-type", "application/json"),)


class UpstreamResponse(ABC):
    """An upstream answer, already translated to the Anthropic wire format."""

    status: int
    headers: list[tuple[str, str]]
    is_event_stream: bool

    @abstractmethod
    def iter_chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives (SSE bytes for streams)."""

    @abstractmethod
    async def read(self) -> bytes:
        """The whole body."""

    @abstractmethod
    def close(self) -> None:
        """Release the connection (back to the pool when the body was fully read)."""

    def request_id(self) -> str | None:
        """The upstream's ``request-id`` header, if it sent one."""
        return header_value(self.headers, "request-id")

    def ended(self) -> bool:
        """True once every body byte has been handed out: ``iter_chunks`` yields nothing more.

        Answered without waiting; ``False`` when unknown. The stream relay uses it to send the last
        chunk together with the end of the response (one write instead of two).
        """
        return False

    def read_ready(self) -> bytes | None:
        """Body bytes already received, handed out without waiting (the next ones ``iter_chunks``
        would give); ``None`` when none are (or when unknown). Raises as ``iter_chunks`` would
        for a broken body. The stream guard reads what a fast upstream has already sent this way,
        without a reader task."""
        return None


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
    """One upstream. Implementations: ``anthropic`` (first party), ``bedrock``, ``vertex``, ``foundry``.

    Preparation is shared (:class:`~gateway.providers.preparation.Preparer`, run once per request
    by :meth:`prepare`); a provider supplies only its ``frame`` hook (path, headers, body shape) and
    the sending: credentials (per attempt), response framing and error translation.
    """

    name: str

    def __init__(self, preparer: Preparer) -> None:
        """``preparer``: the shared preparation, built by the implementation with its ``frame``."""
        self.preparer = preparer
        self.model_listing = ModelListing(preparer.resolver)

    def prepare(self, client: ClientRequest) -> PreparedRequest:
        """The request every attempt sends: once per request, before the retry loop."""
        return self.preparer.prepare(client)

    @abstractmethod
    def frame(self, shaped: Shaped) -> Framed:
        """Path, headers (no credentials) and body bytes for a shaped request, computed once."""

    @abstractmethod
    async def messages(self, request: PreparedRequest) -> UpstreamResponse:
        """``POST /v1/messages``, streaming when ``request.stream``."""

    @abstractmethod
    async def count_tokens(self, request: PreparedRequest) -> UpstreamResponse:
        """``POST /v1/messages/count_tokens``."""

    async def list_models(self, headers: list[tuple[str, str]], query: str) -> UpstreamResponse:
        """``GET /v1/models``: what this deployment serves, answered locally from the model table,
        the model map and (with discovery on) the cloud's catalogue. The first party asks upstream."""
        return BufferedResponse(200, self.model_listing.page(), list(JSON_HEADERS))

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

    def reload_key_file(self) -> bool | None:
        """``SIGHUP``: re-read the upstream key's ``*_FILE``; ``True`` if a new key is in use,
        ``None`` when the key came from no file (the default)."""
        return None
