"""The client's address behind trusted reverse proxies (``GATEWAY_TRUSTED_PROXIES``).

``X-Forwarded-For`` is believed only when the TCP peer is a trusted proxy (an ingress, a load
balancer); its entries are then walked from the right, skipping trusted addresses, and the first
untrusted one is the client (entries left of it are whatever the client sent: never used). A
malformed entry ends the walk: the nearest trusted hop that reported it stands for the client.
Used by the fleet's per-IP limits; the connection-level per-IP cap keeps the TCP peer.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from typing import Final

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

MAX_HOPS: Final = 32  # entries walked at most (a longer chain of trusted hops stops at the 32nd)
MAX_ENTRY: Final = 64  # longer than any IP literal with a port and a zone


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


def _trusted(address: Address, trusted: Sequence[Network]) -> bool:
    return any(address.version == network.version and address in network for network in trusted)


def client_address(peer: str | None, forwarded_for: Iterable[str], trusted: Sequence[Network]) -> str:
    """The address a per-IP limit should count: the TCP ``peer`` unless it is trusted, else the
    first untrusted ``X-Forwarded-For`` entry from the right (``forwarded_for``: every value of the
    header, in order). Never raises."""
    if peer is None:
        return "unknown"
    client = parse_address(peer)
    if client is None:
        return peer[:MAX_ENTRY]
    if not trusted or not _trusted(client, trusted):
        return str(client)
    hops = [entry for value in forwarded_for for entry in value.split(",")]
    for raw in reversed(hops[-MAX_HOPS:]):
        hop = parse_address(raw)
        if hop is None:  # garbage where an address should be: the trusted hop that sent it
            return str(client)
        client = hop
        if not _trusted(hop, trusted):
            return str(hop)
    return str(client)  # every hop is trusted: the farthest one
