"""Microsoft Foundry error responses, translated to the Anthropic error envelope.

Model errors pass through (message per :mod:`.redaction`); Azure gateway errors are mapped by
status or code with a generic message, since Azure messages name resources and tenants.

Details: docs/internals/gateway-providers.md
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

import orjson

from gateway.errors import error_body, error_type_for_status
from gateway.headers import relayable_response_headers
from gateway.providers.base import BufferedResponse
from gateway.providers.redaction import client_message

AZURE_CODES: Final[Mapping[str, int]] = {
    "api_not_supported": 501,
    "operationnotsupported": 501,
    "deploymentnotfound": 404,
    "401": 401,
    "unauthorized": 401,
    "invalidauthenticationtoken": 401,
    "permissiondenied": 403,
    "429": 429,
    "ratelimitreached": 429,
}
"""Azure ``error.code`` (lower-cased) -> status, where the code says more than the HTTP status."""

NO_RETRY_STATUSES: Final = frozenset({401, 501})
_DROP_HEADERS: Final = frozenset({"content-type", "x-should-retry"})


def _anthropic_error(document: Any) -> tuple[str, str] | None:
    if isinstance(document, dict) and document.get("type") == "error":
        error = document.get("error")
        if isinstance(error, dict) and isinstance(error.get("type"), str):
            message = error.get("message")
            return error["type"], message if isinstance(message, str) else ""
    return None


def _azure_error(document: Any) -> tuple[str, str] | None:
    """``(code, message)`` of an Azure gateway error, else ``None``."""
    if not isinstance(document, dict):
        return None
    error = document.get("error")
    if not isinstance(error, dict) or "code" not in error:
        return None
    message = error.get("message")
    return str(error["code"]), message if isinstance(message, str) else ""


def _classify(http_status: int, raw: bytes) -> tuple[int, str, str, bool]:
    try:
        document = orjson.loads(raw)
    except orjson.JSONDecodeError:
        document = None
    envelope = _anthropic_error(document)
    if envelope is not None:
        return http_status, envelope[0], envelope[1], True
    azure = _azure_error(document)
    if azure is not None:
        code, message = azure
        status = AZURE_CODES.get(code.lower(), http_status)
        return status, error_type_for_status(status), f"{code}: {message}", False
    return http_status, error_type_for_status(http_status), raw[:500].decode("utf-8", "replace"), False


def foundry_error_response(
    http_status: int,
    body: bytes,
    upstream_headers: Iterable[tuple[str, str]],
    request_id: str,
    model: str = "",
) -> BufferedResponse:
    """The Anthropic-shaped answer for a non-2xx Foundry response.

    A 404 names the client's own model (the deployment name), as the first-party API does; the
    upstream's wording, which names the resource, is only logged.
    """
    status, error_type, message, envelope = _classify(http_status, body)
    if status < 400:
        status, error_type = 502, "api_error"
    text = client_message(
        "foundry", status, error_type, message, anthropic_envelope=envelope, request_id=request_id
    )
    if status == 404 and model and not envelope:
        text = f"model: {model}"
    headers = [
        (name, value)
        for name, value in relayable_response_headers(upstream_headers)
        if name.lower() not in _DROP_HEADERS
    ]
    headers.append(("content-type", "application/json"))
    if status in NO_RETRY_STATUSES:
        headers.append(("x-should-retry", "false"))
    return BufferedResponse(status=status, body=error_body(error_type, text), headers=headers)
