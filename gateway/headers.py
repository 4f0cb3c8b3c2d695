"""Header forwarding rules shared by every provider.

Requests: the client's headers are forwarded as an open list (``anthropic-*``, ``x-stainless-*``,
``user-agent``, ``x-app``, a tenant's custom headers...) minus hop-by-hop headers, the client's own
credentials, and headers the gateway computes itself. Responses: upstream headers are relayed minus
hop-by-hop and framing headers (the gateway re-frames the body) and cookies.
"""

from __future__ import annotations

import re
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
_NAMES_NOTHING_KEPT: Final = _DROP_REQUEST | {"close"}
"""``Connection`` tokens that name no forwarded header (``keep-alive``, as the SDKs send, ``close``)."""

# The gateway re-frames (and aiohttp decompresses) the body, so these no longer describe it.
_DROP_RESPONSE: Final = HOP_BY_HOP | frozenset(
    {"content-length", "content-encoding", "set-cookie", "date", "server", "via", "alt-svc"}
)


# request headers the gateway reads besides forwarding them (found in the forwarding pass)
BETA_HEADER: Final = "anthropic-beta"
SESSION_HEADER: Final = "x-claude-code-session-id"
FALLBACK_SESSION_HEADER: Final = "x-session-id"
RETRY_COUNT_HEADER: Final = "x-stainless-retry-count"  # the SDKs' attempt number (providers.md s. 5)

_DROP, _KEEP, _VERSION, _CONNECTION, _BETA, _SESSION, _FALLBACK, _RETRY_COUNT = range(8)
_READ: Final = {
    BETA_HEADER: _BETA,
    SESSION_HEADER: _SESSION,
    FALLBACK_SESSION_HEADER: _FALLBACK,
    RETRY_COUNT_HEADER: _RETRY_COUNT,
}
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
        kind = _READ.get(lower, _KEEP)
    if len(_NAME_KINDS) < _MAX_NAME_KINDS:  # names are the client's: remember a bounded set
        _NAME_KINDS[name] = kind
    return kind


class ClientHeaders(list[tuple[str, str]]):
    """The client's forwardable headers (a list: order and case as sent), with the values of the
    headers the gateway reads, found while the list was made: ``betas`` (every ``anthropic-beta``
    value, in order), and the first ``session``, ``fallback_session`` and ``retry_count``. Readers
    of a plain header list (a reshaped copy) find them with :func:`header_value`."""

    __slots__ = ("betas", "fallback_session", "retry_count", "session")

    def __init__(self, headers: Iterable[tuple[str, str]] = ()) -> None:
        super().__init__(headers)
        self.betas: list[str] = []
        self.session: str | None = None
        self.fallback_session: str | None = None
        self.retry_count: str | None = None
        for name, value in self:
            self._read(_READ.get(name.lower(), _KEEP), value)

    def _read(self, kind: int, value: str) -> None:
        if kind == _BETA:
            self.betas.append(value)
        elif kind == _SESSION:
            if self.session is None:
                self.session = value
        elif kind == _FALLBACK:
            if self.fallback_session is None:
                self.fallback_session = value
        elif kind == _RETRY_COUNT and self.retry_count is None:
            self.retry_count = value


def forwardable_request_headers(inbound: Iterable[tuple[str, str]]) -> ClientHeaders:
    """The client's headers that may go upstream, in their original order and case.

    A missing ``anthropic-version`` is filled in with the documented default. (Each distinct
    header name is classified once: clients send the same names on every request.)
    """
    out = ClientHeaders()
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
        elif kind != _DROP:  # forwarded, and read by the gateway
            out.append((name, value))
            out._read(kind, value)
    if connection is not None:  # headers the client's ``Connection`` names are hop-by-hop too
        tokens = {token.strip().lower() for value in connection for token in value.split(",")}
        if not tokens <= _NAMES_NOTHING_KEPT:  # (``keep-alive`` alone, the usual case, names none)
            out = ClientHeaders((name, value) for name, value in out if name.lower() not in tokens)
            has_version = any(name.lower() == "anthropic-version" for name, _ in out)
    if not has_version:
        out.append(("anthropic-version", DEFAULT_ANTHROPIC_VERSION))
    return out


# What aiohttp refuses to write in a header (RFC 9110 section 5.5): a relayed one would fail the
# whole answer (a 500 and a traceback) after the upstream's status was accounted.
_UNSENDABLE: Final = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def sendable(name: str, value: str) -> bool:
    """Whether an upstream's header can go on the client's wire (no control character)."""
    return _UNSENDABLE.search(name) is None and _UNSENDABLE.search(value) is None


def relayable_response_headers(upstream: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """The upstream's headers a client may get: not hop-by-hop or framing, not cookies, and none an
    upstream made unsendable with a control character (dropped, not the answer)."""
    kept = [(name, value) for name, value in upstream if name.lower() not in _DROP_RESPONSE]
    if not "".join([name + value for name, value in kept]).isprintable():  # (a tab, non-ASCII...)
        kept = [(name, value) for name, value in kept if sendable(name, value)]
    return kept


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
