"""The sign-in's HTTP calls to the company IdP (discovery, JWKS, token endpoint) on the gateway's
egress path, as the upstream calls go (``gateway.transport``, ``gateway.egress``).

Each URL gets its proxy from ``HTTPS_PROXY``/``HTTP_PROXY``/``NO_PROXY`` as snapshotted in the
settings (``proxy_for``: the JWKS may live on another host than the issuer); TLS is checked against
``GATEWAY_CA_BUNDLE`` (else the system store), without the upstream's mTLS client certificate; the
connect (``GATEWAY_UPSTREAM_CONNECT_TIMEOUT_S``), every read and the whole call are bounded. A
failure is an :class:`IdpError` whose message names it (``gateway.egress``: a proxy refusal, a
certificate not trusted...) and never holds the proxy's credentials.
"""

from __future__ import annotations

from typing import Any, Final

import aiohttp
import orjson

from gateway.egress import EgressFailure, EgressKind, classify_aiohttp, host_port, proxy_refusal
from gateway.settings.upstream_egress import EgressSettings
from gateway.transport import build_ssl_context, proxy_for

TOTAL_S: Final = 10.0
MAX_BODY_BYTES: Final = 1024 * 1024  # discovery documents and key sets are a few kB
POOL: Final = 16


class IdpError(Exception):
    """The IdP could not be used (unreachable, malformed answer, a token that does not verify);
    ``egress`` is set when the way out failed (proxy, TLS, connection, timeout)."""

    def __init__(self, message: str, egress: EgressFailure | None = None) -> None:
        super().__init__(message)
        self.egress = egress


class IdpHttp:
    """One pooled session to the IdP, opened on first use (inside the running loop)."""

    def __init__(self, egress: EgressSettings, total_s: float = TOTAL_S) -> None:
        self._egress = egress
        self._total_s = total_s
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(
                limit=POOL, ssl=build_ssl_context(self._egress, client_cert=False), ttl_dns_cache=60
            )
            timeout = aiohttp.ClientTimeout(
                total=self._total_s,
                sock_connect=min(self._egress.upstream_connect_timeout_s, self._total_s),
                sock_read=self._total_s,
            )
            self._session = aiohttp.ClientSession(  # shared by every sign-in: no IdP cookie is kept
                connector=connector, timeout=timeout, trust_env=False, cookie_jar=aiohttp.DummyCookieJar()
            )
        return self._session

    def proxy_for(self, url: str) -> str | None:
        return proxy_for(url, self._egress)

    async def request(
        self,
        method: str,
        url: str,
        *,
        form: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any]:
        """``(status, parsed JSON body)``; :class:`IdpError` when the IdP cannot be reached or does
        not answer JSON."""
        proxy = proxy_for(url, self._egress)
        where = host_port(url)
        try:
            async with self._open().request(
                method, url, data=form, headers=headers, proxy=proxy, allow_redirects=False
            ) as response:
                if response.status == 407 and proxy is not None:  # plain http through the proxy
                    failure = proxy_refusal(407, response.reason, host_port(proxy), where, tunnel=False)
                    raise IdpError(failure.message, failure)
                body = bytearray()
                async for chunk in response.content.iter_any():
                    body += chunk
                    if len(body) > MAX_BODY_BYTES:
                        raise IdpError(f"{where} answered more than {MAX_BODY_BYTES} bytes")
                status = response.status
        except TimeoutError:  # aiohttp's connect and read timeouts are TimeoutErrors too
            failure = EgressFailure(
                EgressKind.TIMEOUT, f"{where} did not answer within {self._total_s:g}s", retryable=True
            )
            raise IdpError(failure.message, failure) from None
        except (aiohttp.ClientConnectionError, aiohttp.ClientHttpProxyError, OSError) as exc:
            failure = classify_aiohttp(exc, proxy=proxy, target=url, ca_bundle=self._egress.ca_bundle)
            raise IdpError(failure.message, failure) from None
        except aiohttp.ClientError as exc:
            raise IdpError(f"{where}: {type(exc).__name__}") from None
        try:
            return status, orjson.loads(body)
        except orjson.JSONDecodeError:
            via = f" (through the egress proxy {host_port(proxy)})" if proxy is not None else ""
            raise IdpError(f"{where} answered {status} without a JSON body{via}") from None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
