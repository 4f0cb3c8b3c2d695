"""Turning an HTTP request into a ``ClientRequest``: authentication, size limits, JSON parsing.

All failures are ``GatewayError``s with the Anthropic error shape and status: 401 (with
``x-should-retry: false`` so clients prompt at once instead of retrying), 413, 400.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from aiohttp import web

from gateway.errors import GatewayError
from gateway.headers import forwardable_request_headers
from gateway.keys import DEFAULT_TEAM, InboundKey, KeyRing, Role
from gateway.providers.base import ClientRequest, Operation


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

    def _authenticate(self, request: web.Request) -> InboundKey | None:
        """The presented key, or ``None`` for an open gateway (no key configured, allowed)."""
        if self._allow_unauthenticated and len(self._keys) == 0:
            return None
        presented = presented_key(request.headers)
        if presented is None:
            raise GatewayError(
                401,
                "missing API key: send it in the x-api-key header or as Authorization: Bearer <key>",
                should_retry=False,
            )
        key = self._keys.lookup(presented)
        if key is None:
            raise GatewayError(401, "invalid x-api-key", should_retry=False)
        return key

    def team_for(self, request: web.Request) -> str:
        key = self._authenticate(request)
        if key is None:
            return DEFAULT_TEAM
        if key.role is not Role.CLIENT:
            raise GatewayError(
                403,
                f"this API key has the {key.role.value} role: it may read /metrics only",
                should_retry=False,
            )
        return key.team

    def check_metrics(self, request: web.Request) -> None:
        key = self._authenticate(request)
        if key is None or key.role is Role.METRICS:
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
        scheme, _, token = authorization.strip().partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
    return None


async def read_body(request: web.Request, max_bytes: int) -> bytes:
    length = request.content_length
    if length is not None and length > max_bytes:
        raise _too_large(max_bytes)
    try:
        return await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise _too_large(max_bytes) from None
    except ConnectionResetError:  # the client hung up mid-body: the answer is only for the access log
        raise GatewayError(400, "the connection closed before the request body was complete") from None
    except web.RequestPayloadError:  # aiohttp could not decode the body's transfer or content encoding
        raise GatewayError(400, "malformed request body") from None


def _too_large(max_bytes: int) -> GatewayError:
    return GatewayError(
        413,
        f"Request exceeds the maximum allowed number of bytes ({max_bytes}).",
        error_type="request_too_large",
    )


def parse_json_object(body: bytes) -> dict[str, Any]:
    if not body:
        raise GatewayError(400, "request body is empty; expected a JSON object")
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise GatewayError(400, f"request body is not valid JSON: {exc}") from None
    if not isinstance(payload, dict):
        raise GatewayError(400, "request body must be a JSON object")
    return payload


async def client_request(
    request: web.Request, operation: Operation, max_bytes: int, request_id: str
) -> ClientRequest:
    body = await read_body(request, max_bytes)
    payload = parse_json_object(body)
    return ClientRequest(
        operation=operation,
        body=body,
        payload=payload,
        headers=forwardable_request_headers(request.headers.items()),
        request_id=request_id,
    )
