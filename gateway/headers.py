"""Header forwarding rules shared by every provider.

Requests: the client's headers are forwarded as an open list (``anthropic-*``, ``x-stainless-*``,
``user-agent``, ``x-app``, a tenant's custom headers...) minus hop-by-hop headers, the client's own
credentials, and headers the gateway computes itself. Responses: upstream headers are relayed minus
hop-by-hop and framing headers (the gateway re-frames the body) and cookies.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

DEFAULT_ANTHROPIC_VERSION: Final = "2023-06-01"

# RFC 9110 section 7.6.1 hop-by-hop headers, plus the legacy proxy ones.
HOP_BY_HOP: Final = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)

# Inbound credentials: never forwarded; the provider applies its own.
CLIENT_CREDENTIALS: Final = frozenset({"x-api-key", "authorization", "api-key", "cookie"})

# Computed by the gateway or the HTTP client for the outbound request. The body always goes upstream
# plain (a coded one is decoded on arrival: gateway.content_coding), so no content-encoding either.
RECOMPUTED: Final = frozenset(
    {"host", "content-length", "content-encoding", "accept-encoding", "x-client-request-id", "expect"}
)

_DROP_REQUEST: Final = HOP_BY_HOP | CLIENT_CREDENTIALS | RECOMPUTED

# The gateway re-frames (and aiohttp decompresses) the body, so these no longer describe it.
_DROP_RESPONSE: Final = HOP_BY_HOP | frozenset(
    {"content-length", "content-encoding", "set-cookie", "date", "server", "via", "alt-svc"}
)


def forwardable_request_headers(inbound: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """The client's headers that may go upstream, in their original order and case.

    A missing ``anthropic-version`` is filled in with the documented default.
    """
    out: list[tuple[str, str]] = []
    has_version = False
    connection_tokens: set[str] = set()
    items = list(inbound)
    for name, value in items:
        if name.lower() == "connection":
            connection_tokens.update(token.strip().lower() for token in value.split(","))
    for name, value in items:
        lower = name.lower()
        if lower in _DROP_REQUEST or lower in connection_tokens:
            continue
        if lower == "anthropic-version":
            has_version = True
        out.append((name, value))
    if not has_version:
        out.append(("anthropic-version", DEFAULT_ANTHROPIC_VERSION))
    return out


def relayable_response_headers(upstream: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(name, value) for name, value in upstream if name.lower() not in _DROP_RESPONSE]


def header_value(headers: Iterable[tuple[str, str]], name: str) -> str | None:
    wanted = name.lower()
    for key, value in headers:
        if key.lower() == wanted:
            return value
    return None


def merge_over(base: Iterable[tuple[str, str]], overrides: Mapping[str, str]) -> list[tuple[str, str]]:
    """``base`` with any header named in ``overrides`` replaced (case-insensitively)."""
    lowered = {name.lower() for name in overrides}
    merged = [(name, value) for name, value in base if name.lower() not in lowered]
    merged.extend(overrides.items())
    return merged
