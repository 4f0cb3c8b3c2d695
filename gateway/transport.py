"""Outbound HTTP: one pooled aiohttp ``ClientSession`` per upstream, set up for corporate networks.

* Proxy: ``HTTPS_PROXY`` / ``HTTP_PROXY`` / ``NO_PROXY`` as snapshotted in the settings (aiohttp's
  own ``trust_env`` would re-read the environment on every request; we decide once per upstream).
* TLS: a custom CA bundle (``GATEWAY_CA_BUNDLE`` or ``SSL_CERT_FILE``) and client mTLS
  (``GATEWAY_CLIENT_CERT`` / ``GATEWAY_CLIENT_KEY``), in one ``SSLContext`` shared by the pool.
* Keep-alive pooling with a bounded number of connections; responses are decompressed by aiohttp
  (we ask only for encodings it can decode) so the bytes we relay are plain.
* Per-team fairness (:class:`TeamSlots`): one team's in-flight upstream requests are capped, so it
  cannot hold the whole pool while other teams' requests queue behind it.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import ssl
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import yarl
from prometheus_client.metrics_core import CounterMetricFamily, Metric
from prometheus_client.registry import CollectorRegistry

from gateway.egress import EgressError, classify_aiohttp, host_port, proxy_refusal, redirected, through
from gateway.errors import GatewayError, UpstreamTimeout
from gateway.headers import relayable_response_headers
from gateway.providers.base import UpstreamResponse
from gateway.settings.upstream_egress import EgressSettings
from gateway.upstream_body import DEFAULT_BODY_LIMITS, BodyLimits, read_bounded
from gateway.upstream_protocol import use_response_handler


@dataclass(frozen=True, slots=True)
class Upstream:
    """A pooled connection to one upstream base URL, with the proxy chosen for it."""

    base_url: str
    session: aiohttp.ClientSession
    proxy: str | None

    first_byte_timeout_s: float
    ca_bundle: Path | None = None
    body_limits: BodyLimits = DEFAULT_BODY_LIMITS  # of a whole (non-streaming) answer

    async def request(
        self,
        method: str,
        path: str,
        *,
        headers: list[tuple[str, str]],
        body: bytes | None = None,
        encoded_path: bool = False,
    ) -> aiohttp.ClientResponse:
        """Send one request and wait for the response headers (bounded by the first-byte timeout).

        Connection failures and answers that are not valid HTTP become 502 and a timeout 504, as
        Anthropic-shaped gateway errors; a proxy or TLS failure is an
        :class:`~gateway.egress.EgressError` naming what failed (see :mod:`gateway.egress`),
        without the proxy's credentials.
        ``encoded_path``: ``path`` is already percent-encoded and goes on the wire as it is (by
        default escapes of reserved characters such as ``%3B`` would be decoded).
        """
        url: str | yarl.URL = self.base_url + path
        if encoded_path:
            url = yarl.URL(str(url), encoded=True)
        # the first-byte bound: asyncio.timeout's semantics (a cancellation of ours becomes the
        # timeout, anyone else's stays a cancellation) for a fraction of its per-call cost
        task = asyncio.current_task()
        assert task is not None
        expiry = _Expiry(task)
        handle = task.get_loop().call_later(self.first_byte_timeout_s, expiry)
        try:
            response = await self.session.request(
                method, url, data=body, headers=headers, proxy=self.proxy, allow_redirects=False
            )
        except asyncio.CancelledError:
            if expiry.fired and expiry.settle():
                via = "" if self.proxy is None else f" {through(self.proxy)}"
                raise UpstreamTimeout(
                    f"upstream did not answer within {self.first_byte_timeout_s:g}s{via}"
                ) from None
            raise
        except (aiohttp.ClientConnectionError, aiohttp.ClientResponseError, OSError) as exc:
            failure = classify_aiohttp(exc, proxy=self.proxy, target=self.base_url, ca_bundle=self.ca_bundle)
            raise EgressError(failure) from None
        finally:
            handle.cancel()
            if expiry.fired:  # ours, but the wait ended with another error: its count undone
                expiry.settle()
        if response.status == 407 and self.proxy is not None:
            # a plain-http upstream through the proxy: only a proxy answers 407
            response.release()
            failure = proxy_refusal(
                407, response.reason, host_port(self.proxy), host_port(self.base_url), tunnel=False
            )
            raise EgressError(failure)
        if 300 <= response.status < 400:
            response.release()
            raise EgressError(
                redirected(host_port(self.base_url), response.status, response.headers.get("location"))
            )
        return response

    async def close(self) -> None:
        await self.session.close()


class _Expiry:
    """The first-byte timer's callback: cancels the waiting task and remembers it did."""

    __slots__ = ("cancelling", "fired", "task")

    def __init__(self, task: asyncio.Task[Any]) -> None:
        self.task = task
        self.cancelling = task.cancelling()  # cancellations already asked for are not ours
        self.fired = False

    def __call__(self) -> None:
        self.fired = True
        self.task.cancel()

    def settle(self) -> bool:
        """Undo the cancellation's count once; whether it was the only one (a timeout, then)."""
        self.fired = False
        return self.task.uncancel() <= self.cancelling


class HttpUpstreamResponse(UpstreamResponse):
    """An aiohttp response relayed as it is (first-party wire format); ``read`` takes at most
    its ``limits`` (:func:`read_bounded`)."""

    __slots__ = ("_limits", "_response", "headers", "is_event_stream", "status")

    def __init__(self, response: aiohttp.ClientResponse, limits: BodyLimits) -> None:
        self._response = response
        self._limits = limits
        self.status = response.status
        self.headers = relayable_response_headers(response.headers.items())
        self.is_event_stream = response.content_type == "text/event-stream"

    def iter_chunks(self) -> AsyncIterator[bytes]:
        return self._response.content.iter_any()  # aiohttp's own iterator: no generator around it

    async def read(self) -> bytes:
        return await read_bounded(self._response, self._limits)

    def close(self) -> None:
        self._response.release()

    def request_id(self) -> str | None:
        return self._response.headers.get("request-id")  # a C lookup: not a scan of ``headers``

    def ended(self) -> bool:
        return self._response.content.at_eof()

    def read_ready(self) -> bytes | None:
        return self._response.content.read_nowait() or None  # b"": nothing buffered


def build_ssl_context(egress: EgressSettings, *, client_cert: bool = True) -> ssl.SSLContext:
    """TLS for egress: trust ``GATEWAY_CA_BUNDLE`` (else the system store); with ``client_cert``,
    present the upstream mTLS certificate (off for third parties such as the sign-in IdP)."""
    context = ssl.create_default_context(
        cafile=str(egress.ca_bundle) if egress.ca_bundle is not None else None
    )
    if client_cert and egress.client_cert is not None:
        context.load_cert_chain(
            str(egress.client_cert),
            str(egress.client_key) if egress.client_key is not None else None,
        )
    return context


def upstream_tls(base_url: str, egress: EgressSettings) -> ssl.SSLContext | bool:
    """The TLS setting of ``base_url``'s pool: ``False`` for ``http``; a context of our own with
    ``GATEWAY_CA_BUNDLE`` or a client certificate; else ``True``: aiohttp's verifying context with
    the system's trust store, loaded once when aiohttp is imported (loading it again for a context
    of our own would cost start-up as much again, for the same trust)."""
    if not base_url.startswith("https"):
        return False
    if egress.ca_bundle is None and egress.client_cert is None:
        return True
    return build_ssl_context(egress)


def bypasses_proxy(host: str, port: int, no_proxy: str) -> bool:
    """Whether ``NO_PROXY`` exempts ``host:port``, with curl's rules.

    Entries are comma-separated; ``*`` matches everything; ``example.com`` and ``.example.com``
    match the domain and its subdomains; ``host:port`` matches one port only; an IP address or a
    CIDR range (``10.0.0.0/8``) matches literal IP hosts in it.
    """
    host = host.lower().strip("[]")
    try:
        address: ipaddress.IPv4Address | ipaddress.IPv6Address | None = ipaddress.ip_address(host)
    except ValueError:
        address = None
    for raw in no_proxy.split(","):
        entry = raw.strip().lower()
        if not entry:
            continue
        if entry == "*":
            return True
        entry_port: int | None = None
        if entry.count(":") == 1 and not entry.startswith("["):
            entry, _, port_text = entry.partition(":")
            if not port_text.isdigit():
                continue
            entry_port = int(port_text)
        entry = entry.strip("[]")
        if entry_port is not None and entry_port != port:
            continue
        if address is not None:
            try:
                if address in ipaddress.ip_network(entry, strict=False):
                    return True
            except ValueError:
                pass
            continue
        domain = entry.lstrip(".")
        if host == domain or host.endswith("." + domain):
            return True
    return False


def proxy_for(url: str, egress: EgressSettings) -> str | None:
    """The proxy URL to use for ``url`` (HTTPS_PROXY or HTTP_PROXY by scheme), unless NO_PROXY."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    if egress.no_proxy and bypasses_proxy(parts.hostname or "", port, egress.no_proxy):
        return None
    return egress.https_proxy if parts.scheme == "https" else egress.http_proxy


def open_upstream(base_url: str, egress: EgressSettings) -> Upstream:
    """Create the pooled session for ``base_url``. Must be called with a running event loop."""
    connector = aiohttp.TCPConnector(
        limit=egress.upstream_pool_size,
        limit_per_host=egress.upstream_pool_size,
        ssl=upstream_tls(base_url, egress),
        keepalive_timeout=60.0,
        enable_cleanup_closed=False,
        ttl_dns_cache=60,
    )
    use_response_handler(connector, asyncio.get_running_loop())  # no resume call per chunk read
    timeout = aiohttp.ClientTimeout(
        total=None,
        connect=None,
        sock_connect=egress.upstream_connect_timeout_s,
        sock_read=None,
    )
    session = aiohttp.ClientSession(
        connector=connector,
        timeout=timeout,
        cookie_jar=aiohttp.DummyCookieJar(),  # shared by every tenant: no upstream cookie is kept
        auto_decompress=True,
        trust_env=False,
        skip_auto_headers=("User-Agent",),
        read_bufsize=2**16,
    )
    return Upstream(
        base_url=base_url.rstrip("/"),
        session=session,
        proxy=proxy_for(base_url, egress),
        first_byte_timeout_s=egress.first_byte_timeout_s,
        ca_bundle=egress.ca_bundle,
        body_limits=BodyLimits(egress.upstream_max_body_bytes, egress.upstream_read_timeout_s),
    )


class UpstreamPool:
    """A provider's one pooled upstream session: opened by ``start()``, closed by ``close()``."""

    __slots__ = ("_upstream",)

    def __init__(self) -> None:
        self._upstream: Upstream | None = None

    def open(self, base_url: str, egress: EgressSettings) -> Upstream:
        if self._upstream is None:
            self._upstream = open_upstream(base_url, egress)
        return self._upstream

    async def close(self) -> None:
        if self._upstream is not None:
            await self._upstream.close()
            self._upstream = None

    @property
    def upstream(self) -> Upstream | None:
        return self._upstream

    def require(self) -> Upstream:
        if self._upstream is None:
            raise RuntimeError("provider used before start()")
        return self._upstream

    @property
    def proxy_label(self) -> str:
        """For start-up logs: whether requests go through an egress proxy."""
        return "yes" if self._upstream is not None and self._upstream.proxy else "no"


class TeamSlots:
    """In-flight upstream requests per team, capped so that one team cannot exhaust the upstream pool.

    The cap is ``GATEWAY_TEAM_MAX_INFLIGHT``; unset (0), it is half of ``GATEWAY_UPSTREAM_POOL_SIZE``
    while the keys in force name two or more teams, and none for a single team (its requests queue
    for a pooled connection as before). A request over the cap is answered ``429 rate_limit_error``
    with ``retry-after``. A dict of counters: ``acquire``/``release`` are a few dict operations.
    """

    __slots__ = ("_configured", "_half_pool", "_inflight", "rejected")

    def __init__(self, configured: int, pool_size: int, registry: CollectorRegistry | None = None) -> None:
        self._configured = configured
        self._half_pool = max(1, pool_size // 2)
        self._inflight: dict[str, int] = {}
        self.rejected: dict[str, int] = {}  # team -> requests refused (teams come from the key file)
        if registry is not None:
            with contextlib.suppress(ValueError):  # a second app on one registry: the first one's counts
                registry.register(self)

    def cap(self, teams: int) -> int:
        """The cap in force with ``teams`` client teams configured (0: none)."""
        if self._configured:
            return self._configured
        return self._half_pool if teams > 1 else 0

    def inflight(self, team: str) -> int:
        return self._inflight.get(team, 0)

    def acquire(self, team: str, teams: int) -> None:
        """Count one more request of ``team`` in flight, or raise the ``429`` when it is at its cap."""
        inflight = self._inflight.get(team, 0)
        cap = self._configured or (self._half_pool if teams > 1 else 0)
        if cap and inflight >= cap:
            self.rejected[team] = self.rejected.get(team, 0) + 1
            raise GatewayError(
                429,
                f"this team already has {cap} requests in flight through the gateway (its limit); retry shortly",
                should_retry=True,
                headers={"retry-after": "1"},
            )
        self._inflight[team] = inflight + 1

    def prime(self, teams: Iterable[str]) -> None:
        """Start the rejection counts of ``teams`` (the key file's) at zero: ``increase()`` misses a
        counter's first increment when its series is born with it. Bounded by the key file."""
        for team in teams:
            self.rejected.setdefault(team, 0)

    def release(self, team: str) -> None:
        left = self._inflight.get(team, 0) - 1
        if left > 0:
            self._inflight[team] = left
        else:
            self._inflight.pop(team, None)

    def collect(self) -> Iterable[Metric]:
        """``gateway_team_inflight_rejected_total{team}`` for the gateway's registry."""
        family = CounterMetricFamily(
            "gateway_team_inflight_rejected",
            "Requests answered 429 because their team was at GATEWAY_TEAM_MAX_INFLIGHT.",
            labels=["team"],
        )
        for team, count in sorted(self.rejected.items()):
            family.add_metric([team], count)
        return [family]
