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


_DROP, _KEEP, _VERSION, _CONNECTION = range(4)
_NAME_KINDS: dict[str, int] = {}  # header name as sent -> what to do with it (bounded below)
_MAX_NAME_KINDS: Final = 1024


def _name_kind(name: str) -> int:
    lower = name.lower()
    if lower == "connection":
        kind = _CONNECTION
    elif lower in _DROP_REQUEST:
        kind = _DROP
    elif lower == "anthropic-version":
        kind = _VERSION
    else:
        kind = _KEEP
    if len(_NAME_KINDS) < _MAX_NAME_KINDS:  # names are the client's: remember a bounded set
        _NAME_KINDS[name] = kind
    return kind


def forwardable_request_headers(inbound: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """The client's headers that may go upstream, in their original order and case.

    A missing ``anthropic-version`` is filled in with the documented default. (Each distinct
    header name is classified once: clients send the same names on every request.)
    """
    out: list[tuple[str, str]] = []
    has_version = False
    connection: list[str] | None = None
    known = _NAME_KINDS
    for name, value in inbound:
        kind = known.get(name)
        if kind is None:
            kind = _name_kind(name)
        if kind == _KEEP:
            out.append((name, value))
        elif kind == _VERSION:
            has_version = True
            out.append((name, value))
        elif kind == _CONNECTION:
            connection = [*(connection or ()), value]
    if connection is not None:  # headers the client's ``Connection`` names are hop-by-hop too
        tokens = {token.strip().lower() for value in connection for token in value.split(",")}
        out = [(name, value) for name, value in out if name.lower() not in tokens]
        has_version = any(name.lower() == "anthropic-version" for name, _ in out)
    if not has_version:
        out.append(("anthropic-version", DEFAULT_ANTHROPIC_VERSION))
    return out


def relayable_response_headers(upstream: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(name, value) for name, value in upstream if name.lower() not in _DROP_RESPONSE]


def header_value(headers: Iterable[tuple[str, str]], name: str) -> str | None:
    """The first value of header ``name`` (case-insensitive), or ``None``."""
    wanted = name.lower()
    size = len(wanted)
    for key, value in headers:
        if len(key) == size and key.lower() == wanted:  # the length first: no lower() for most
            return value
    return None


def merge_over(base: Iterable[tuple[str, str]], overrides: Mapping[str, str]) -> list[tuple[str, str]]:
    """``base`` with any header named in ``overrides`` replaced (case-insensitively)."""
    lowered = {name.lower() for name in overrides}
    merged = [(name, value) for name, value in base if name.lower() not in lowered]
    merged.extend(overrides.items())
    return merged
