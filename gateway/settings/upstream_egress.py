"""Egress settings: how the gateway reaches its upstream (proxy, TLS trust, mTLS, pool, timeouts)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, ClassVar

from pydantic import AfterValidator, AliasChoices, BeforeValidator, Field

from gateway import config_checks
from gateway.config_values import proxy_url
from gateway.settings.section import ReadableFile, Section


def _ca_pem(value: Path | None) -> Path | None:
    if value is not None:
        config_checks.check_ca_bundle(value)
    return value


def _cert_pem(value: Path | None) -> Path | None:
    if value is not None:
        config_checks.check_certificate(value)
    return value


ProxyUrl = Annotated[str | None, BeforeValidator(proxy_url)]


class EgressSettings(Section):
    """The connection to the upstream and the readiness of its credential."""

    title: ClassVar[str] = "Egress"

    https_proxy: ProxyUrl = Field(None, validation_alias=AliasChoices("HTTPS_PROXY", "https_proxy"), repr=False)
    """Egress proxy for https upstreams (`host:port` means `http://host:port`)."""
    http_proxy: ProxyUrl = Field(None, validation_alias=AliasChoices("HTTP_PROXY", "http_proxy"), repr=False)
    """Egress proxy for http upstreams."""
    no_proxy: str = Field("", validation_alias=AliasChoices("NO_PROXY", "no_proxy"))
    """Hosts that bypass the proxy: domains, `host:port`, IPs, CIDR ranges, `*`."""
    ca_bundle: Annotated[ReadableFile, AfterValidator(_ca_pem)] = Field(
        None, validation_alias=AliasChoices("GATEWAY_CA_BUNDLE", "SSL_CERT_FILE")
    )
    """CA bundle (PEM) for upstream TLS, e.g. a TLS-inspection CA (unset: the system store)."""
    client_cert: Annotated[ReadableFile, AfterValidator(_cert_pem)] = Field(None, alias="GATEWAY_CLIENT_CERT")
    """Client certificate (PEM) for upstream mTLS (with its key, or GATEWAY_CLIENT_KEY)."""
    client_key: ReadableFile = Field(None, alias="GATEWAY_CLIENT_KEY")
    """Unencrypted PEM private key of GATEWAY_CLIENT_CERT."""
    upstream_pool_size: int = Field(512, alias="GATEWAY_UPSTREAM_POOL_SIZE", gt=0)
    """Pooled keep-alive connections to the upstream."""
    team_max_inflight: int = Field(0, alias="GATEWAY_TEAM_MAX_INFLIGHT", ge=0)
    """Upstream requests one team may have in flight; more get `429` (0: half the pool once keys name two or more teams)."""
    upstream_connect_timeout_s: float = Field(10.0, alias="GATEWAY_UPSTREAM_CONNECT_TIMEOUT_S", gt=0)
    """TCP/TLS connect timeout, seconds."""
    first_byte_timeout_s: float = Field(600.0, alias="GATEWAY_FIRST_BYTE_TIMEOUT_S", gt=0)
    """Wait for the upstream's response headers, seconds; then `504 timeout_error`."""
    upstream_max_body_bytes: int = Field(32 * 1024 * 1024, alias="GATEWAY_MAX_UPSTREAM_BODY_BYTES", gt=0)
    """Largest non-streaming upstream answer the gateway reads (decoded bytes); beyond it
    `502 api_error`. Streams are relayed as they come, unbounded in length."""
    upstream_read_timeout_s: float = Field(60.0, alias="GATEWAY_UPSTREAM_READ_TIMEOUT_S", gt=0)
    """Longest silence of an upstream sending a whole (non-streaming) answer, once its headers came;
    then `504 timeout_error`. Streams have the idle watchdog instead."""
    credential_failures_not_ready: int = Field(3, alias="GATEWAY_CREDENTIAL_FAILURES_NOT_READY", ge=1)
    """/readyz turns not-ready after this many consecutive failed upstream-credential fetches."""
    credential_recheck_s: float = Field(30.0, alias="GATEWAY_CREDENTIAL_RECHECK_S", gt=0)
    """While not ready, /readyz retries the credential fetch at most this often, seconds."""
    credential_timeout_s: float = Field(10.0, alias="GATEWAY_CREDENTIAL_TIMEOUT_S", gt=0, le=300)
    """Bound on each token-endpoint call (connect, then each read) of the Google, Azure and AWS credential libraries, seconds."""
