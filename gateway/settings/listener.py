"""Listener settings: address, request limits, connection-level defence and graceful shutdown."""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import BeforeValidator, Field

from gateway.client_address import Network, ProxyHeader, parse_trusted_proxies
from gateway.settings.section import Section


def _networks(value: object) -> object:
    return parse_trusted_proxies(value) if isinstance(value, str) else value


def _lower(value: object) -> object:
    return value.strip().lower() if isinstance(value, str) else value


class ListenerSettings(Section):
    """Where the gateway listens and what a client connection may cost it."""

    title: ClassVar[str] = "Listener"

    host: str = Field("127.0.0.1", alias="GATEWAY_HOST")
    """Listen address (`0.0.0.0` in containers)."""
    port: int = Field(8080, alias="GATEWAY_PORT", ge=0, le=65535)
    """Listen port."""
    max_body_bytes: int = Field(32 * 1024 * 1024, alias="GATEWAY_MAX_BODY_BYTES", gt=0)
    """Larger request bodies get `413 request_too_large`."""
    # connection-level defence (gateway.connections): slow clients are timed out, connections capped
    header_timeout_s: float = Field(10.0, alias="GATEWAY_HEADER_TIMEOUT_S", gt=0)
    """Request headers must arrive within this of the connection (or the request's first byte), seconds; then `408`."""
    body_timeout_s: float = Field(20.0, alias="GATEWAY_BODY_TIMEOUT_S", gt=0)
    """Grace for a request body after its headers, seconds; after it the body must keep GATEWAY_BODY_MIN_RATE."""
    body_min_rate: int = Field(1024, alias="GATEWAY_BODY_MIN_RATE", ge=0)
    """Minimum request-body rate after the grace, bytes/s (each N bytes earn 1 s more; 0: a fixed deadline)."""
    keepalive_timeout_s: float = Field(75.0, alias="GATEWAY_KEEPALIVE_TIMEOUT_S", gt=0)
    """An idle keep-alive connection is closed after this many seconds."""
    max_connections: int = Field(0, alias="GATEWAY_MAX_CONNECTIONS", ge=0)
    """Open client connections at most (0: from the open-file limit, leaving room for upstream connections)."""
    max_incomplete_connections: int = Field(0, alias="GATEWAY_MAX_INCOMPLETE_CONNECTIONS", ge=0)
    """Connections still sending their request at most; the oldest are shed first (0: half of the connection cap)."""
    max_connections_per_ip: int = Field(0, alias="GATEWAY_MAX_CONNECTIONS_PER_IP", ge=0)
    """Open connections per client address (IPv6: per /64) at most; that address's oldest incomplete go first (0: no cap)."""
    trusted_proxies: Annotated[tuple[Network, ...], BeforeValidator(_networks)] = Field(
        (), alias="GATEWAY_TRUSTED_PROXIES"
    )
    """Comma-separated CIDRs of reverse proxies whose X-Forwarded-For the fleet's per-IP limits believe (unset: the TCP peer)."""
    trusted_proxy_header: Annotated[ProxyHeader, BeforeValidator(_lower)] = Field(
        "x-forwarded-for", alias="GATEWAY_TRUSTED_PROXY_HEADER"
    )
    """The header the trusted proxies set: `x-forwarded-for` or RFC 7239 `forwarded` (the other is ignored)."""
    max_request_line_bytes: int = Field(8190, alias="GATEWAY_MAX_REQUEST_LINE_BYTES", ge=256)
    """Longest request line; longer gets `414`."""
    max_header_bytes: int = Field(8190, alias="GATEWAY_MAX_HEADER_BYTES", ge=256)
    """Longest header field (name and value); longer gets `431`."""
    max_headers: int = Field(100, alias="GATEWAY_MAX_HEADERS", ge=16)
    """Most header fields in a request; more gets `431`."""
    # hostile-input limits on request bodies (gateway.inbound): the depth bound keeps every
    # recursive step on client data (orjson writes at most 254 levels, Python recursion) in range
    max_json_depth: int = Field(128, alias="GATEWAY_MAX_JSON_DEPTH", ge=16, le=200)
    """Request bodies nesting JSON deeper than this get `400 invalid_request_error` (16-200)."""
    max_decompression_ratio: int = Field(100, alias="GATEWAY_MAX_DECOMPRESSION_RATIO", ge=2)
    """A gzip/deflate request body decompressing to more than this many times its size gets `413`."""
    write_stall_timeout_s: float = Field(30.0, alias="GATEWAY_WRITE_STALL_TIMEOUT_S", gt=0)
    """A write the client does not take in this long closes its connection and its upstream request, seconds."""
    # graceful shutdown (gateway.process.serve): on SIGTERM readiness fails at once; after the
    # delay the listener closes; in-flight requests get until the timeout (counted from the signal)
    drain_timeout_s: float = Field(60.0, alias="GATEWAY_DRAIN_TIMEOUT_S", ge=0)
    """On SIGTERM, in-flight requests get this long (seconds, from the signal)."""
    drain_delay_s: float = Field(0.0, alias="GATEWAY_DRAIN_DELAY_S", ge=0)
    """On SIGTERM, the listener stays open this long after readiness fails, seconds."""
