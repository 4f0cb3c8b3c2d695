"""Turning an HTTP request into a ``ClientRequest``: authentication, size limits, JSON parsing.

All failures are ``GatewayError``s with the Anthropic error shape and status: 401 (with
``x-should-retry: false`` so clients prompt at once instead of retrying), 413, 415, 400.

Hostile input is refused before anything works on it: keys are compared as the bytes the client
sent (``gateway.keys``), a ``Content-Encoding`` is decoded within limits
(``gateway.content_coding``), the JSON is parsed and its nesting bounded
(``GATEWAY_MAX_JSON_DEPTH``, ``gateway.json_limits``) before any recursive step sees it, and a
header value the HTTP client could not send upstream (not UTF-8) is a 400, not a failure later.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, Final
from urllib.parse import quote

import orjson
from aiohttp import web
from aiohttp.web_protocol import RequestPayloadError

from gateway.content_coding import BodyDecoder, check_inflated, content_coding, too_large
from gateway.errors import GatewayError
from gateway.fleet.principal import Principal, Source
from gateway.headers import forwardable_request_headers
from gateway.json_limits import TooDeep, loads_within
from gateway.keys import DEFAULT_TEAM, InboundKey, KeyRing, Role
from gateway.providers.base import ClientRequest, Operation
from gateway.settings.listener import ListenerSettings

OPEN_PRINCIPAL = Principal(subject="anonymous", team=DEFAULT_TEAM, groups=(DEFAULT_TEAM,), source=Source.OPEN)


@functools.lru_cache(maxsize=4096)
def _key_principal(team: str) -> Principal:
    """One ``Principal`` per team, made once (the request path allocates nothing for it)."""
    return Principal.for_key(team)


class Authenticator:
    """Checks the inbound key (``x-api-key`` or ``Authorization: Bearer``) and its role.

    ``team_for`` guards the model endpoints: client keys only (a metrics key gets 403
    ``permission_error``). ``check_metrics`` guards ``/metrics``, which shows every team's spend:
    metrics keys only (a client key gets 403 ``permission_error``); an open gateway (no key
    configured, unauthenticated access allowed) serves it to anyone, as it does every endpoint.
    The ring may be replaced at any time (``gateway.key_reload``); every check reads the set in
    force.
    """

    def __init__(self, keys: KeyRing, allow_unauthenticated: bool) -> None:
        self._keys = keys
        self._allow_unauthenticated = allow_unauthenticated
        self._tokens: Callable[[str], Principal] | None = None
        self._remembered: Callable[[str], Principal | None] | None = None

    def accept_tokens(
        self, check: Callable[[str], Principal], remembered: Callable[[str], Principal | None] | None = None
    ) -> None:
        """Also accept sign-in access tokens (``gateway.fleet``): ``check`` yields the caller or
        raises the 401 ``GatewayError``. Static keys keep working side by side. ``remembered``:
        ``check`` of a token already verified (``None`` for any other value), tried first so a
        signed-in caller's bearer is not digested as a static key on every request."""
        self._tokens = check
        self._remembered = remembered

    def _authenticate(self, request: web.Request) -> InboundKey | Principal | None:
        """The presented key, the signed-in caller, or ``None`` for an open gateway (no key
        configured, allowed)."""
        open_gateway = self._allow_unauthenticated and len(self._keys) == 0
        if open_gateway and self._tokens is None:
            return None
        presented = presented_key(request.headers)
        if open_gateway and presented is None:
            return None
        if presented is None:
            raise GatewayError(
                401,
                "missing API key: send it in the x-api-key header or as Authorization: Bearer <key>",
                should_retry=False,
            )
        if self._remembered is not None:
            known = self._remembered(presented)
            if known is not None:
                return known
        key = self._keys.lookup(presented)
        if key is None:
            if self._tokens is not None:
                return self._tokens(presented)
            raise GatewayError(401, "invalid x-api-key", should_retry=False)
        return key

    def principal_for(self, request: web.Request) -> Principal:
        """The caller of a model endpoint (client keys only; a metrics key gets 403)."""
        key = self._authenticate(request)
        if key is None:
            return OPEN_PRINCIPAL
        if isinstance(key, Principal):
            return key
        if key.role is not Role.CLIENT:
            allowed = "read /metrics" if key.role is Role.METRICS else "use the admin API"
            raise GatewayError(
                403,
                f"this API key has the {key.role.value} role: it may {allowed} only",
                should_retry=False,
            )
        return _key_principal(key.team)

    def admin_for(self, request: web.Request, admin_groups: frozenset[str]) -> Principal:
        """The caller of the fleet admin API: an ``admin`` key, or a principal in an admin group
        (the policy's ``admin_groups``); anyone else gets 403 ``permission_error``."""
        key = self._authenticate(request)
        if isinstance(key, InboundKey) and key.role is Role.ADMIN:
            return Principal(subject=f"admin-key:{key.team}", team=key.team, groups=(), source=Source.KEY)
        principal = self.principal_for(request)
        if admin_groups.isdisjoint(principal.groups):
            raise GatewayError(
                403, "the admin API needs an admin key or membership of an admin group", should_retry=False
            )
        return principal

    def team_for(self, request: web.Request) -> str:
        return self.principal_for(request).team

    def check_metrics(self, request: web.Request) -> None:
        key = self._authenticate(request)
        if key is None or (isinstance(key, InboundKey) and key.role is Role.METRICS):
            return
        raise GatewayError(
            403,
            "/metrics is readable with a metrics key only (GATEWAY_METRICS_API_KEYS, or role=metrics "
            "in GATEWAY_API_KEYS_FILE)",
            should_retry=False,
        )


def presented_key(headers: Mapping[str, str]) -> str | None:
    key = headers.get("x-api-key")
    if key:
        return key.strip()
    authorization = headers.get("authorization")
    if authorization:
        if authorization.startswith("Bearer "):  # as every client spells it: one slice, one strip
            return authorization[7:].strip() or None
        scheme, _, token = authorization.strip().partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
    return None


async def read_body(request: web.Request, max_bytes: int, max_ratio: int) -> bytes:
    """The request body, decoded when it has a ``Content-Encoding`` (``gateway.content_coding``).

    413 over ``max_bytes``; 400 when the body cannot be read (a broken chunked framing, corrupt
    compressed data, the connection closed before the body was whole: the access log then says
    ``client_disconnected``); 415 for a coding the gateway does not decode.
    """
    coding = content_coding(request.headers)
    length = request.content_length
    if length is not None and length > max_bytes:
        raise too_large(max_bytes)
    # set when aiohttp's parser inflated the body (a server not run by gateway.process.running)
    inflated_from: int | None = getattr(request.content, "total_compressed_bytes", None)
    try:
        if coding is None or inflated_from is not None:
            body = await request.read()
            if coding is not None:
                check_inflated(len(body), request.content.total_compressed_bytes or 0, max_bytes, max_ratio)
            return body
        decoder = BodyDecoder(coding, max_bytes, max_ratio)
        async for chunk in request.content.iter_any():
            decoder.feed(chunk)
        return decoder.finish()
    except web.HTTPRequestEntityTooLarge:
        raise too_large(max_bytes) from None
    except RequestPayloadError:  # the body's framing or coding, as aiohttp's parser found it
        raise GatewayError(400, "the request body could not be read") from None
    except ConnectionResetError:  # the client went away mid-body: nobody will see this answer
        raise GatewayError(400, "the connection closed before the whole request body arrived") from None


def parse_json_object(body: bytes, max_depth: int) -> dict[str, Any]:
    """The body as a JSON object nesting at most ``max_depth`` levels (``gateway.json_limits``)."""
    if not body:
        raise GatewayError(400, "request body is empty; expected a JSON object")
    try:
        payload = loads_within(body, max_depth)
    except TooDeep:
        raise GatewayError(400, f"request body nests JSON more than {max_depth} levels deep") from None
    except orjson.JSONDecodeError as exc:
        raise GatewayError(400, f"request body is not valid JSON: {exc}") from None
    if not isinstance(payload, dict):
        raise GatewayError(400, "request body must be a JSON object")
    return payload


def forwardable_headers(request: web.Request) -> list[tuple[str, str]]:
    """The client's headers that go upstream; 400 for a value that is not UTF-8 (the HTTP client
    could not send it: aiohttp hands such bytes over as lone surrogates)."""
    headers = forwardable_request_headers(request.headers.items())
    for _, value in headers:
        if not value.isascii():
            try:
                value.encode()
            except UnicodeEncodeError:  # named, not shown: never echo what the client sent
                raise GatewayError(400, "a request header value is not valid UTF-8") from None
    return headers


# what may stand in a query as it is (RFC 3986 query: pchar / "/" / "?", and "%" of the escapes)
_QUERY_SAFE: Final = "!$&'()*+,;=:@/?%"


def raw_query(request: web.Request) -> str:
    """The query string as the client sent it, escapes kept (``%2523`` stays ``%2523``, ``+`` stays
    ``+``); only a byte no URL may hold (a space, a control, a non-ASCII byte) is percent-encoded."""
    query = request.raw_path.partition("?")[2]
    return quote(query.encode("utf-8", "surrogateescape"), safe=_QUERY_SAFE)


async def client_request(
    request: web.Request, operation: Operation, listener: ListenerSettings, request_id: str
) -> ClientRequest:
    body = await read_body(request, listener.max_body_bytes, listener.max_decompression_ratio)
    payload = parse_json_object(body, listener.max_json_depth)
    return ClientRequest(
        operation=operation,
        body=body,
        payload=payload,
        headers=forwardable_headers(request),
        request_id=request_id,
    )
