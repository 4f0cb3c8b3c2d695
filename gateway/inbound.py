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
from gateway.keys import DEFAULT_TEAM, KeyRing
from gateway.providers.base import ClientRequest, Operation


class Authenticator:
    """Checks the inbound key (``x-api-key`` or ``Authorization: Bearer``) and returns its team."""

    def __init__(self, keys: KeyRing, allow_unauthenticated: bool) -> None:
        self._keys = keys
        self._open = allow_unauthenticated and len(keys) == 0

    def team_for(self, request: web.Request) -> str:
        if self._open:
            return DEFAULT_TEAM
        presented = presented_key(request.headers)
        if presented is None:
            raise GatewayError(
                401,
                "missing API key: send it in the x-api-key header or as Authorization: Bearer <key>",
                should_retry=False,
            )
        team = self._keys.team_for(presented)
        if team is None:
            raise GatewayError(401, "invalid x-api-key", should_retry=False)
        return team


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
