"""What went wrong on the way out: egress failures (proxy, TLS, connection) named without secrets.

Any library's outbound failure becomes one :class:`EgressFailure`: a kind, a message a client may
see (never userinfo, never a header) and whether another attempt can help.

Details: docs/internals/gateway.md
"""

from __future__ import annotations

import enum
import re
import socket
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp

from gateway.errors import UpstreamUnavailable


class EgressKind(enum.StrEnum):
    PROXY_AUTH = "proxy_auth"
    PROXY_REFUSED = "proxy_refused"
    PROXY_ERROR = "proxy_error"
    PROXY_UNREACHABLE = "proxy_unreachable"
    TLS_VERIFY = "tls_verify"
    TLS = "tls"
    UNREACHABLE = "unreachable"
    TIMEOUT = "timeout"
    INVALID_ANSWER = "invalid_answer"  # not valid HTTP: an oversized header, a bad status line or framing
    REDIRECT = "redirect"  # a 3xx: never followed, never relayed (a client would take its key there)


@dataclass(frozen=True, slots=True)
class EgressFailure:
    kind: EgressKind
    message: str
    retryable: bool


class EgressError(UpstreamUnavailable):
    """An egress failure as the client's 502 ``api_error`` (``x-should-retry: false`` when final)."""

    def __init__(self, failure: EgressFailure) -> None:
        super().__init__(failure.message, retryable=failure.retryable)
        self.kind = failure.kind
        if not failure.retryable:
            self.should_retry = False


def trust_store(ca_bundle: Path | None) -> str:
    """What TLS certificates are checked against, for messages."""
    return (
        f"the CA bundle {ca_bundle} (GATEWAY_CA_BUNDLE)"
        if ca_bundle is not None
        else "the system trust store"
    )


def host_port(url: str | None) -> str:
    """``host:port`` of a URL, without userinfo (for naming a proxy or a target)."""
    if not url:
        return "?"
    parts = urlsplit(url if "://" in url else "http://" + url)
    host = parts.hostname or "?"
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is None:
        port = 443 if parts.scheme == "https" else 80
    return f"{host}:{port}"


_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/@\s'\"]*@")
_PASSWORD_FIELD = re.compile(r"(?i)(password=)(['\"]).*?\2")
_AUTH_HEADER = re.compile(r"(?i)((?:proxy-)?authorization['\"]?\s*[:=,]\s*['\"]?)[^'\"\r\n,}]+")


def scrub(text: str) -> str:
    """``text`` without secrets: URL userinfo, ``password='...'`` fields (aiohttp's ``BasicAuth``
    repr) and ``Authorization`` / ``Proxy-Authorization`` values."""
    text = _USERINFO.sub(r"\1", text)
    text = _PASSWORD_FIELD.sub(r"\1\2***\2", text)
    return _AUTH_HEADER.sub(r"\1***", text)


# -- the failures ---------------------------------------------------------------------------------
def proxy_refusal(
    status: int, reason: str | None, proxy: str, target: str, *, tunnel: bool = True
) -> EgressFailure:
    """The proxy refused: ``tunnel`` the CONNECT to ``target``, else a plain-http request to it."""
    asked = f"the CONNECT to {target}" if tunnel else f"the request to {target}"
    try:
        phrase = reason or HTTPStatus(status).phrase
    except ValueError:
        phrase = "error"
    if status == 407:
        return EgressFailure(
            EgressKind.PROXY_AUTH,
            f"proxy authentication failed: the egress proxy {proxy} answered 407 {phrase} to "
            f"{asked} (check the user and password in HTTPS_PROXY / HTTP_PROXY)",
            retryable=False,
        )
    if status == 403:
        return EgressFailure(
            EgressKind.PROXY_REFUSED,
            f"the egress proxy {proxy} refused {asked}: 403 {phrase} (its access rules do not "
            "allow this host or port)",
            retryable=False,
        )
    return EgressFailure(
        EgressKind.PROXY_ERROR,
        f"the egress proxy {proxy} could not complete {asked}: {status} {phrase}",
        retryable=status >= 500,
    )


def proxy_unreachable(proxy: str, detail: str) -> EgressFailure:
    return EgressFailure(
        EgressKind.PROXY_UNREACHABLE, f"proxy unreachable: egress proxy {proxy}: {detail}", True
    )


def tls_verify_failed(target: str, detail: str, ca_bundle: Path | None) -> EgressFailure:
    return EgressFailure(
        EgressKind.TLS_VERIFY,
        f"TLS verification failed for {target}: {detail} (checked against {trust_store(ca_bundle)})",
        retryable=False,
    )


def redirected(target: str, status: int, location: str | None) -> EgressFailure:
    """A 3xx from an upstream: the gateway follows no redirect and relays none. Relayed, a client that
    follows redirects would send its gateway key and prompt to ``location``; the Messages API never
    redirects, so the base URL (or a proxy in the way) is wrong. Only the target's host is named."""
    to = f" to {host_port(location)}" if location and "://" in location else ""
    return EgressFailure(
        EgressKind.REDIRECT,
        f"{target} answered {status}, redirecting{to}; the gateway does not follow redirects (check the base URL)",
        False,
    )


def unreachable(target: str, detail: str) -> EgressFailure:
    return EgressFailure(EgressKind.UNREACHABLE, f"upstream unreachable: {target}: {detail}", True)


# -- aiohttp (inference calls) ----------------------------------------------------------------------
def classify_aiohttp(
    exc: BaseException, *, proxy: str | None, target: str, ca_bundle: Path | None
) -> EgressFailure:
    """The failure behind an aiohttp connection error (``proxy``: the proxy URL used, if any).
    Through a proxy, a connection that drops or an answer that is not HTTP may be the proxy's
    doing as much as the upstream's: the message names both."""
    where = host_port(target)
    if isinstance(exc, aiohttp.ClientHttpProxyError):
        return proxy_refusal(exc.status, exc.message, host_port(proxy), where)
    if proxy is not None:
        where = f"{where} {through(proxy)}"
    if isinstance(exc, aiohttp.ClientResponseError):  # aiohttp's parser refused what came back
        reason = scrub(exc.message).split(":", 1)[0].strip()[:120]  # its name, not the bytes it quotes
        return EgressFailure(EgressKind.INVALID_ANSWER, f"{where} answered with invalid HTTP: {reason}", True)
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return tls_verify_failed(where, _verify_detail(exc.certificate_error), ca_bundle)
    if isinstance(exc, aiohttp.ClientSSLError):
        return EgressFailure(EgressKind.TLS, f"TLS handshake with {where} failed: {_short(exc)}", False)
    if isinstance(exc, aiohttp.ClientConnectorError):
        detail = _os_detail(exc.os_error)
        if proxy is not None and (
            isinstance(exc, aiohttp.ClientProxyConnectionError) or _is_proxy(exc.host, exc.port, proxy)
        ):
            return proxy_unreachable(host_port(proxy), detail)
        return unreachable(where, detail)
    return unreachable(where, _short(exc))


def through(proxy: str) -> str:
    """How a message names the egress proxy a request went through (``host:port`` only)."""
    return f"(through the egress proxy {host_port(proxy)})"


def _is_proxy(host: str, port: int | None, proxy: str) -> bool:
    parts = urlsplit(proxy)
    return (parts.hostname or "").lower() == host.lower().strip("[]") and (parts.port or 80) == port


def _verify_detail(error: BaseException) -> str:
    if isinstance(error, ssl.SSLCertVerificationError) and error.verify_message:
        return f"certificate verify failed: {error.verify_message}"
    return _short(error)


def _os_detail(error: OSError) -> str:
    if isinstance(error, socket.gaierror):
        return "name not resolved"
    if isinstance(error, ConnectionRefusedError):
        return "connection refused"
    if isinstance(error, TimeoutError):
        return "connection timed out"
    return _short(error)


def _short(exc: BaseException) -> str:
    text = scrub(str(exc) or type(exc).__name__)
    return text if len(text) <= 200 else text[:200] + "..."


# -- synchronous SDKs (credential calls: botocore, requests/urllib3, azure-core) ----------------------
_TUNNEL = re.compile(r"Tunnel connection failed: (\d{3})(?: ([A-Za-z][A-Za-z -]*))?")
_VERIFY = re.compile(r"certificate verify failed: ([^()'\"\]]+)")
_PROXY_TYPES = frozenset({"ProxyError", "ProxyConnectionError", "ClientProxyConnectionError"})
_TIMEOUT_TYPES = frozenset({"ConnectTimeoutError", "ConnectTimeout", "ReadTimeout", "ReadTimeoutError"})
_CONNECT_TYPES = frozenset(
    {"NewConnectionError", "NameResolutionError", "EndpointConnectionError", "ConnectionError"}
)


def causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and everything it wraps: causes, contexts, exception arguments, the ``reason`` of
    urllib3's ``MaxRetryError``, botocore's ``error`` keyword, azure-core's ``inner_exception``."""
    pending = [exc]
    seen: set[int] = set()
    while pending and len(seen) < 40:
        current = pending.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        linked: list[object] = [current.__cause__, current.__context__, *current.args]
        linked.append(getattr(current, "reason", None))
        linked.append(getattr(current, "inner_exception", None))
        kwargs = getattr(current, "kwargs", None)
        if isinstance(kwargs, dict):
            linked.append(kwargs.get("error"))
        pending.extend(item for item in linked if isinstance(item, BaseException))


def _type_names(exc: BaseException) -> set[str]:
    return {cls.__name__ for cls in type(exc).__mro__}


def classify_sync(
    exc: BaseException, *, target: str, proxy: str | None, ca_bundle: Path | None
) -> EgressFailure | None:
    """The egress failure inside a synchronous SDK's exception, or ``None`` if there is none.

    ``target``: what was being reached, for the message ("AWS STS at sts.amazonaws.com:443");
    ``proxy``: the proxy URL the SDK was given for it, if any.
    """
    chain = list(causes(exc))
    texts = " | ".join(str(item) for item in chain)
    proxy_name = host_port(proxy) if proxy else "?"
    tunnel = _TUNNEL.search(texts)
    if tunnel is not None:
        return proxy_refusal(
            int(tunnel.group(1)), (tunnel.group(2) or "").strip() or None, proxy_name, target
        )
    for item in chain:
        if isinstance(item, ssl.SSLCertVerificationError):
            return tls_verify_failed(target, _verify_detail(item), ca_bundle)
    verify = _VERIFY.search(texts)
    if verify is not None or "CERTIFICATE_VERIFY_FAILED" in texts:
        verify_detail = (
            f"certificate verify failed: {verify.group(1).strip()}" if verify else "certificate verify failed"
        )
        return tls_verify_failed(target, verify_detail, ca_bundle)
    names: set[str] = set()
    for item in chain:
        names |= _type_names(item)
    detail = _sync_detail(chain, texts)
    if names & _PROXY_TYPES and proxy is not None:
        return proxy_unreachable(proxy_name, detail or "connection failed")
    if detail is not None:  # before timeouts: urllib3's NewConnectionError is a ConnectTimeoutError
        return unreachable(target, detail)
    if names & _TIMEOUT_TYPES or any(isinstance(item, TimeoutError) for item in chain):
        return EgressFailure(EgressKind.TIMEOUT, f"{target} did not answer in time", True)
    if "SSLError" in names:
        return EgressFailure(EgressKind.TLS, f"TLS handshake with {target} failed", False)
    if names & _CONNECT_TYPES:
        return unreachable(target, "connection failed")
    return None


def _sync_detail(chain: list[BaseException], texts: str) -> str | None:
    for item in chain:
        if isinstance(item, socket.gaierror) or "NameResolutionError" in _type_names(item):
            return "name not resolved"
        if isinstance(item, ConnectionRefusedError):
            return "connection refused"
    if "Name or service not known" in texts or "Temporary failure in name resolution" in texts:
        return "name not resolved"
    if "Connection refused" in texts:
        return "connection refused"
    return None
