"""The client's address behind trusted reverse proxies (``GATEWAY_TRUSTED_PROXIES``).

The proxies' header (``GATEWAY_TRUSTED_PROXY_HEADER``: ``X-Forwarded-For`` or RFC 7239
``Forwarded``, configured, never guessed: a client can send the other one through a proxy that
does not touch it) is believed only when the TCP peer is a trusted proxy (an ingress, a load
balancer); its entries are then walked from the right, skipping trusted addresses, and the first
untrusted one is the client (entries left of it are whatever the client sent: never used). A
malformed entry (for ``Forwarded`` also an obfuscated ``_node``, ``unknown``, or an element without
``for=``) ends the walk: the nearest trusted hop that reported it stands for the client.
Used by the fleet's per-IP limits; the connection-level per-IP cap keeps the TCP peer.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Sequence
from typing import Final, Literal

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

MAX_HOPS: Final = 32  # entries walked at most (a longer chain of trusted hops stops at the 32nd)
MAX_ENTRY: Final = 64  # longer than any IP literal with a port and a zone

ProxyHeader = Literal["x-forwarded-for", "forwarded"]
HEADER_NAMES: Final[dict[str, str]] = {"x-forwarded-for": "X-Forwarded-For", "forwarded": "Forwarded"}
# RFC 7230 section 3.2.6 token characters; RFC 7239 section 6 node-port (a port or an obfuscated one)
_TCHAR: Final = frozenset("!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
_NODE_PORT: Final = re.compile(r"[0-9]{1,5}|_[A-Za-z0-9._-]+")


def parse_trusted_proxies(text: str) -> tuple[Network, ...]:
    """Comma-separated CIDRs or single addresses; ``ValueError`` naming the first bad entry."""
    networks: list[Network] = []
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            raise ValueError(f"{entry[:80]!r} is not an IP address or CIDR range") from None
    return tuple(networks)


def parse_address(text: str) -> Address | None:
    """An IP literal as proxies write it (``1.2.3.4``, ``1.2.3.4:5678``, ``::1``, ``[::1]:5678``);
    IPv4-mapped IPv6 becomes IPv4. ``None`` for anything else."""
    entry = text.strip()
    if not entry or len(entry) > MAX_ENTRY:
        return None
    if entry.startswith("["):
        inside, bracket, rest = entry[1:].partition("]")
        if not bracket or (rest and not (rest.startswith(":") and rest[1:].isdigit())):
            return None
        entry = inside
    elif entry.count(":") == 1:
        entry, _, port = entry.partition(":")
        if not port.isdigit():
            return None
    try:
        address = ipaddress.ip_address(entry)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def parse_node(text: str) -> Address | None:
    """An RFC 7239 section 6 node as a ``for=`` value holds it (unquoted): an IPv4 address or a
    bracketed IPv6 one, each with an optional (possibly obfuscated) port; IPv4-mapped IPv6 becomes
    IPv4. ``None`` for ``unknown``, an obfuscated ``_identifier`` and anything malformed."""
    if not text or len(text) > MAX_ENTRY or text != text.strip():
        return None
    if text.startswith("["):
        host, bracket, rest = text[1:].partition("]")
        if not bracket or ":" not in host:  # only IPv6 goes in brackets
            return None
    else:
        host, colon, port = text.partition(":")
        rest = colon + port
        if "." not in host:  # an IPv4 address (an unbracketed IPv6 one is malformed)
            return None
    if rest and not (rest.startswith(":") and _NODE_PORT.fullmatch(rest[1:])):
        return None
    return parse_address(host)


def _split(text: str, separator: str) -> tuple[list[str], bool]:
    """``text`` cut at each ``separator`` outside quoted-strings; and whether the last quoted-string
    was closed (an unclosed one swallows the rest of the text into the last part)."""
    parts: list[str] = []
    start = 0
    quoted = escaped = False
    for index, char in enumerate(text):
        if escaped:
            escaped = False
        elif quoted:
            if char == "\\":
                escaped = True
            elif char == '"':
                quoted = False
        elif char == '"':
            quoted = True
        elif char == separator:
            parts.append(text[start:index])
            start = index + 1
    parts.append(text[start:])
    return parts, not quoted


def _value(text: str) -> str | None:
    """A forwarded-pair's value (RFC 7239 section 4: a token or a quoted-string), unquoted."""
    if text.startswith('"'):
        if len(text) < 2 or not text.endswith('"'):
            return None
        out: list[str] = []
        escaped = False
        for char in text[1:-1]:
            if escaped:
                out.append(char)
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                return None  # a quote inside: not one quoted-string
            else:
                out.append(char)
        return None if escaped else "".join(out)
    return text if text and all(char in _TCHAR for char in text) else None


def _for_of(element: str) -> str | Literal[False] | None:
    """The ``for=`` value of one forwarded-element (parameter names case-insensitive, each at most
    once); ``False`` for an empty element (RFC 7230 section 7: ignored), ``None`` when it is
    malformed or has no ``for``."""
    if not element.strip(" \t"):
        return False
    pairs, _ = _split(element, ";")
    seen: dict[str, str] = {}
    for pair in pairs:
        pair = pair.strip(" \t")
        if not pair:
            continue
        name, equals, raw = pair.partition("=")
        value = _value(raw)
        if not equals or value is None or not name or any(char not in _TCHAR for char in name):
            return None
        if name.lower() in seen:
            return None
        seen[name.lower()] = value
    return seen.get("for")


def forwarded_hops(values: Iterable[str]) -> list[str | None]:
    """The ``for=`` node of every element of every ``Forwarded`` header line, in order; ``None``
    for an element that is malformed or names no client (an unclosed quoted-string spoils the rest
    of its line: one ``None``)."""
    hops: list[str | None] = []
    for value in values:
        elements, closed = _split(value, ",")
        for index, element in enumerate(elements):
            node = None if not closed and index == len(elements) - 1 else _for_of(element)
            if node is not False:
                hops.append(node)
    return hops


def _trusted(address: Address, trusted: Sequence[Network]) -> bool:
    return any(address.version == network.version and address in network for network in trusted)


def client_address(
    peer: str | None,
    forwarded_for: Iterable[str],
    trusted: Sequence[Network],
    header: ProxyHeader = "x-forwarded-for",
) -> str:
    """The address a per-IP limit should count: the TCP ``peer`` unless it is trusted, else the
    first untrusted entry from the right of ``header`` (``forwarded_for``: every value of that
    header, in order). Never raises."""
    if peer is None:
        return "unknown"
    client = parse_address(peer)
    if client is None:
        return peer[:MAX_ENTRY]
    if not trusted or not _trusted(client, trusted):
        return str(client)
    if header == "forwarded":
        hops, parse = forwarded_hops(forwarded_for), parse_node
    else:
        hops, parse = [entry for value in forwarded_for for entry in value.split(",")], parse_address
    for raw in reversed(hops[-MAX_HOPS:]):
        hop = None if raw is None else parse(raw)
        if hop is None:  # garbage where an address should be: the trusted hop that sent it
            return str(client)
        client = hop
        if not _trusted(hop, trusted):
            return str(hop)
    return str(client)  # every hop is trusted: the farthest one
