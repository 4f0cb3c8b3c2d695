"""A request as the client sent it (:class:`ClientRequest`) and as it goes upstream
(:class:`PreparedRequest`).

A ``ClientRequest`` holds the client's own bytes; a changed copy (``with_payload``: the cache
step's normalisation, a model fallback, the non-streaming variant) serialises its body only when
something reads it, so a body that is reshaped again before it is sent is serialised once.

A ``PreparedRequest`` is made once per request, before the retry loop, by the provider's
:class:`~gateway.providers.preparation.Preparer`: model mapped, beta policy applied, request tags
stripped, and the upstream path, headers (without credentials) and body bytes decided. Every attempt
sends these bytes; only the credential (and a SigV4 signature) is added per attempt.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final, NamedTuple, Protocol

import orjson

from gateway.session_ids import session_id_of


class _Unset(enum.Enum):
    UNSET = "unset"


_UNSET: Final = _Unset.UNSET


class Operation(enum.Enum):
    MESSAGES = "messages"
    COUNT_TOKENS = "count_tokens"


@dataclass(frozen=True, slots=True)
class ClientRequest:
    """What the client asked for, as the server received and parsed it."""

    operation: Operation
    _body: bytes | None  # ``None``: serialise ``payload`` when first read
    payload: Mapping[str, Any]
    headers: list[tuple[str, str]]
    request_id: str
    model: str  # the payload's ``model`` ("" when it is not a string)
    stream: bool  # a Messages request with ``"stream": true``
    _session_id: str | _Unset | None = field(compare=False, repr=False)  # :attr:`session_id`

    def __init__(
        self,
        operation: Operation,
        body: bytes | None,
        payload: Mapping[str, Any],
        headers: list[tuple[str, str]],
        request_id: str,
    ) -> None:
        object.__setattr__(self, "operation", operation)
        object.__setattr__(self, "_body", body)
        object.__setattr__(self, "payload", payload)
        object.__setattr__(self, "headers", headers)
        object.__setattr__(self, "request_id", request_id)
        model = payload.get("model")
        object.__setattr__(self, "model", model if isinstance(model, str) else "")
        object.__setattr__(self, "stream", operation is Operation.MESSAGES and payload.get("stream") is True)
        object.__setattr__(self, "_session_id", _UNSET)

    @property
    def session_id(self) -> str | None:
        """The client session the request belongs to (:func:`gateway.session_ids.session_id_of`),
        found once per request object."""
        found = self._session_id
        if isinstance(found, _Unset):
            found = session_id_of(self.headers, self.payload)
            object.__setattr__(self, "_session_id", found)
        return found

    @property
    def body(self) -> bytes:
        """The client's bytes, or (for a changed copy) the payload serialised once, on first use."""
        body = self._body
        if body is None:
            body = orjson.dumps(self.payload)
            object.__setattr__(self, "_body", body)
        return body

    def with_payload(self, payload: Mapping[str, Any]) -> ClientRequest:
        """The same request with a changed body, serialised deterministically (key order kept) when
        its bytes are first needed."""
        return ClientRequest(self.operation, None, payload, self.headers, self.request_id)

    def with_headers(self, headers: list[tuple[str, str]]) -> ClientRequest:
        """The same request with other headers (the body stays as it is, serialised or not)."""
        return ClientRequest(self.operation, self._body, self.payload, headers, self.request_id)

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


class Shaped(NamedTuple):
    """A client request with the upstream's model id, betas and first-party body decided (the
    provider-independent part of preparation; a named tuple: cheap to build on every request)."""

    client: ClientRequest  # the client's request (after the cache step), for errors and variants
    upstream_model: str  # the upstream's id ("" when the client sent none)
    payload: Mapping[str, Any]  # copy-on-write: the client's own mapping when nothing changed
    betas: tuple[str, ...]  # the ``anthropic-beta`` header sent upstream
    body_betas: tuple[str, ...]  # Bedrock's body ``anthropic_beta`` list
    dropped_betas: tuple[str, ...]  # betas the provider's policy removed (client names)
    body_changed: bool  # preparation changed the client's body

    def first_party_body(self) -> bytes:
        """The client's bytes when nothing changed, else a deterministic re-serialisation."""
        return orjson.dumps(self.payload) if self.body_changed else self.client.body


class Framed(NamedTuple):
    """What a provider's ``frame`` hook decides: where and what to send (no credentials)."""

    path: str  # below the upstream's base URL (percent-encoded where the provider needs it)
    body: bytes
    headers: tuple[tuple[str, str], ...]
    unsupported: str | None = None  # the upstream cannot serve this request: why (answered locally)


class Deriving(Protocol):
    """What made a prepared request, asked again for its variants (the provider's ``Preparer``)."""

    def prepare(self, client: ClientRequest) -> PreparedRequest: ...

    def non_streaming(self, prepared: PreparedRequest) -> PreparedRequest: ...


@dataclass(frozen=True, slots=True)
class PreparedRequest:
    """One request as every attempt sends it upstream; never changed once made.

    ``shaped``: the provider-independent decisions; ``path``, ``body`` and ``headers`` (no
    credential: the provider adds it, or signs, per attempt): the provider's framing of them.
    ``payload`` is the first-party body after preparation, read-only: the client's own mapping when
    nothing changed, else a copy in which only the changed parts are new (copy-on-write).
    """

    shaped: Shaped
    path: str  # below the upstream's base URL (percent-encoded where the provider needs it)
    body: bytes
    headers: tuple[tuple[str, str], ...]
    unsupported: str | None  # the upstream cannot serve this request: why (answered locally)
    derive: Deriving = field(repr=False, compare=False)

    @property
    def client(self) -> ClientRequest:
        return self.shaped.client

    @property
    def upstream_model(self) -> str:
        return self.shaped.upstream_model

    @property
    def payload(self) -> Mapping[str, Any]:
        return MappingProxyType(self.shaped.payload)

    @property
    def betas(self) -> tuple[str, ...]:
        return self.shaped.betas

    @property
    def body_betas(self) -> tuple[str, ...]:
        return self.shaped.body_betas

    @property
    def dropped_betas(self) -> tuple[str, ...]:
        return self.shaped.dropped_betas

    @property
    def body_changed(self) -> bool:
        return self.shaped.body_changed

    @property
    def operation(self) -> Operation:
        return self.shaped.client.operation

    @property
    def model(self) -> str:
        """The model the client asked for (the retry loop's fallback compares and names it)."""
        return self.shaped.client.model

    @property
    def stream(self) -> bool:
        return self.shaped.client.stream

    @property
    def request_id(self) -> str:
        return self.shaped.client.request_id

    def with_model(self, model: str) -> PreparedRequest:
        """Prepared again for another model (a model fallback: once per fallback model)."""
        return self.derive.prepare(self.shaped.client.with_model(model))

    def as_non_streaming(self) -> PreparedRequest:
        """The same request without ``stream``: same model and beta decisions, framed again."""
        return self.derive.non_streaming(self)
