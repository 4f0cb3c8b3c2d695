"""Connection-level defence: slow clients time out, connections are capped, the oldest incomplete go first.

A few checks per received chunk, none per response byte. Over a cap the oldest incomplete, then
the oldest idle connection is shed before a new one is refused (``503``). Client addresses never
appear in a metric label or a log line.

Details: docs/internals/gateway.md
"""

from __future__ import annotations

import resource
import socket
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from gateway.connection_events import ConnectionEvents
from gateway.http_errors import raw_response

if TYPE_CHECKING:
    from gateway.config import Settings
    from gateway.http_protocol import GuardedHandler

FD_RESERVE: Final = 64  # descriptors kept for everything that is not a connection (logs, epoll, DNS...)
MIN_CONNECTIONS: Final = 16
# the automatic cap's ceiling where descriptors are plentiful (containers often allow 2^20): memory,
# not descriptors, bounds a process then; raise GATEWAY_MAX_CONNECTIONS deliberately beyond it
AUTO_CEILING: Final = 10_000
UNLIMITED_FDS: Final = 1 << 20
_V4_MAPPED: Final = bytes(10) + b"\xff\xff"  # ::ffff:a.b.c.d, an IPv4 client of a dual-stack socket


def peer_key(peername: object) -> str | bytes | None:
    """What the per-address cap counts a peer under: an IPv4 address as its text; an IPv6 address
    by its /64 (one host or subscriber is usually given a whole /64 and can pick any address in it,
    so a per-address cap keyed by the full 128 bits would not hold); an IPv4-mapped IPv6 address as
    the IPv4 address. ``None`` (not capped): a Unix socket or an unknown peer."""
    if not isinstance(peername, tuple) or not peername or not isinstance(peername[0], str):
        return None
    host: str = peername[0]
    if ":" not in host:
        return host
    try:
        packed = socket.inet_pton(socket.AF_INET6, host.partition("%")[0])  # without a zone index
    except OSError:
        return None
    if packed.startswith(_V4_MAPPED):
        return socket.inet_ntoa(packed[12:])
    return packed[:8]


def open_file_limit() -> int:
    """The process's soft ``RLIMIT_NOFILE`` (a large number when unlimited)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return UNLIMITED_FDS if soft == resource.RLIM_INFINITY or soft > UNLIMITED_FDS else soft


def auto_max_connections(fd_limit: int, upstream_pool_size: int) -> int:
    """Client connections the descriptors allow: each busy one may hold a pooled upstream connection
    too (at most the pool size of them), and ``FD_RESERVE`` stay for the rest of the process; at
    most ``AUTO_CEILING``."""
    budget = fd_limit - FD_RESERVE
    return max(MIN_CONNECTIONS, min(AUTO_CEILING, budget - min(upstream_pool_size, budget // 2)))


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """The resolved timeouts and caps of one listener (see the module docstring)."""

    header_timeout_s: float = 10.0
    body_timeout_s: float = 20.0
    body_min_rate: int = 1024
    keepalive_timeout_s: float = 75.0
    max_connections: int = 1024
    max_incomplete: int = 512
    max_per_ip: int = 0  # open connections per client address (0: no cap)
    max_request_line_bytes: int = 8190
    max_header_bytes: int = 8190
    max_headers: int = 100
    max_body_bytes: int = 32 * 1024 * 1024  # a larger announced body gets no 100 Continue
    fd_limit: int = 0  # the open-file limit the caps were derived from (0: not derived)

    @classmethod
    def from_settings(cls, settings: Settings | None, fd_limit: int | None = None) -> ConnectionLimits:
        """The limits of ``settings`` (defaults without), with the ``0`` (automatic) caps resolved."""
        limit = open_file_limit() if fd_limit is None else fd_limit
        if settings is None:
            maximum = auto_max_connections(limit, 512)
            return cls(max_connections=maximum, max_incomplete=max(8, maximum // 2), fd_limit=limit)
        listener = settings.listener
        maximum = listener.max_connections or auto_max_connections(limit, settings.egress.upstream_pool_size)
        incomplete = listener.max_incomplete_connections or max(8, maximum // 2)
        return cls(
            header_timeout_s=settings.listener.header_timeout_s,
            body_timeout_s=settings.listener.body_timeout_s,
            body_min_rate=settings.listener.body_min_rate,
            keepalive_timeout_s=settings.listener.keepalive_timeout_s,
            max_connections=maximum,
            max_incomplete=min(incomplete, maximum),
            max_per_ip=settings.listener.max_connections_per_ip,
            max_request_line_bytes=settings.listener.max_request_line_bytes,
            max_header_bytes=settings.listener.max_header_bytes,
            max_headers=settings.listener.max_headers,
            max_body_bytes=settings.listener.max_body_bytes,
            fd_limit=limit,
        )

    def handler_args(self) -> dict[str, Any]:
        """aiohttp ``RequestHandler`` arguments (AppRunner keyword arguments)."""
        return {
            "keepalive_timeout": self.keepalive_timeout_s,
            "max_line_size": self.max_request_line_bytes,
            "max_field_size": self.max_header_bytes,
            "max_headers": self.max_headers,
        }

    def describe(self) -> str:
        rate = f" then {self.body_min_rate} B/s" if self.body_min_rate else ""
        source = f" (open-file limit {self.fd_limit})" if self.fd_limit else ""
        per_ip = f", {self.max_per_ip} per client address" if self.max_per_ip else ""
        return (
            f"at most {self.max_connections} connections{source}, {self.max_incomplete} still sending{per_ip}; "
            f"timeouts: headers {self.header_timeout_s:g}s, body {self.body_timeout_s:g}s{rate}, "
            f"keep-alive {self.keepalive_timeout_s:g}s"
        )


class ConnectionGuard:
    """The open connections of one listener, by age: caps, shedding, and the counts for metrics."""

    def __init__(self, limits: ConnectionLimits, events: ConnectionEvents | None = None) -> None:
        self.limits = limits
        self.events = events or ConnectionEvents()
        self._open = 0
        self._incomplete: OrderedDict[GuardedHandler, None] = OrderedDict()  # oldest first
        self._idle: OrderedDict[GuardedHandler, None] = OrderedDict()
        # client address (peer_key) -> its open connections, oldest first; only with a per-IP cap
        self._by_peer: dict[str | bytes, dict[GuardedHandler, None]] = {}
        self.per_ip = limits.max_per_ip
        # answers written by the connection layer itself (no request object to answer through)
        self.header_timeout_response = raw_response(
            408, "timeout_error", f"request headers not received within {limits.header_timeout_s:g}s"
        )
        self.shed_response = raw_response(
            503,
            "overloaded_error",
            "the gateway has too many connections open: this one was closed before its request was complete; retry",
            {"retry-after": "1", "x-should-retry": "true"},
        )
        self.per_ip_response = raw_response(
            503,
            "overloaded_error",
            "too many connections from this client address (GATEWAY_MAX_CONNECTIONS_PER_IP): "
            "this one was closed before its request was complete; retry",
            {"retry-after": "1", "x-should-retry": "true"},
        )

    # -- counts (gateway.connection_events.OpenCounts) ------------------------------------------
    @property
    def open(self) -> int:
        return self._open

    @property
    def incomplete(self) -> int:
        return len(self._incomplete)

    @property
    def idle(self) -> int:
        return len(self._idle)

    @property
    def max_connections(self) -> int:
        return self.limits.max_connections

    @property
    def max_incomplete(self) -> int:
        return self.limits.max_incomplete

    @property
    def max_per_ip(self) -> int:
        return self.limits.max_per_ip

    def peer_connections(self, key: str | bytes) -> int:
        """Open connections counted for one client address (``peer_key``)."""
        return len(self._by_peer.get(key, ()))

    # -- transitions, called by the handler ----------------------------------------------------
    def admit(self, conn: GuardedHandler) -> None:
        """A connection was accepted (it starts incomplete); shed what the caps require."""
        self.events.accepted += 1
        self._open += 1
        incomplete = self._incomplete
        incomplete[conn] = None
        while len(incomplete) > self.limits.max_incomplete:
            self.shed(next(iter(incomplete)), "shed_incomplete")
        while self._open > self.limits.max_connections:
            oldest = next(iter(incomplete), None)
            if oldest is not None and oldest is not conn:
                self.shed(oldest, "shed_incomplete")
            elif self._idle:
                self.shed(next(iter(self._idle)), "shed_idle")
            else:
                self.shed(conn, "refused")

    def admit_peer(self, conn: GuardedHandler, key: str | bytes) -> bool:
        """The accepted ``conn`` comes from ``key`` (per-IP cap in force): over the cap, that
        address's oldest incomplete connection is shed, else its oldest idle one, else ``conn``
        is refused (``False``). A few dict operations; a scan of that address's connections
        (at most the cap) only when over it."""
        conns = self._by_peer.get(key)
        if conns is None:
            conns = self._by_peer[key] = {}
        conns[conn] = None
        conn.peer = key
        if len(conns) <= self.per_ip:
            return True
        incomplete, idle = self._incomplete, self._idle
        victim = next((c for c in conns if c in incomplete and c is not conn), None)
        if victim is not None:
            self.shed(victim, "ip_shed_incomplete", self.per_ip_response)
            return True
        victim = next((c for c in conns if c in idle), None)
        if victim is not None:
            self.shed(victim, "ip_shed_idle", self.per_ip_response)
            return True
        self.shed(conn, "ip_refused", self.per_ip_response)
        return False

    def incomplete_again(self, conn: GuardedHandler) -> None:
        """A new request started arriving on a kept-alive connection: it is the newest incomplete."""
        if not conn.counted:
            return
        self._idle.pop(conn, None)
        self._incomplete.pop(conn, None)
        self._incomplete[conn] = None
        while len(self._incomplete) > self.limits.max_incomplete:
            self.shed(next(iter(self._incomplete)), "shed_incomplete")

    def complete(self, conn: GuardedHandler) -> None:
        self._incomplete.pop(conn, None)
        self._idle.pop(conn, None)

    def now_idle(self, conn: GuardedHandler) -> None:
        if conn.counted:
            self._incomplete.pop(conn, None)
            self._idle[conn] = None

    def forget(self, conn: GuardedHandler) -> None:
        """The connection is gone (or shed): it no longer counts."""
        if conn.counted:
            conn.counted = False
            self._open -= 1
            self._incomplete.pop(conn, None)
            self._idle.pop(conn, None)
            key = conn.peer
            if key is not None:
                conns = self._by_peer[key]
                del conns[conn]
                if not conns:
                    del self._by_peer[key]

    def shed(self, conn: GuardedHandler, reason: str, response: bytes | None = None) -> None:
        """Close ``conn`` to make room; one that sent no complete request is answered ``response``
        (the connection cap's ``503`` by default)."""
        self.forget(conn)
        self.events.connection_closed(reason)
        conn.shed(response or self.shed_response)
