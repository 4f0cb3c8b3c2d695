"""Fleet telemetry settings: the OTLP intake on ``/v1/metrics``, ``/v1/logs``, ``/v1/traces``
(``gateway.fleet.otlp_intake``) and forwarding to collectors (``gateway.fleet.otlp_forward``)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, SecretStr, field_validator

from gateway import config_checks
from gateway.config_values import http_url
from gateway.settings.section import Section


class TelemetrySettings(Section):
    """What Claude Code's OTLP exports become, and where they are forwarded."""

    title: ClassVar[str] = "Fleet telemetry (OTLP intake and forwarding)"

    telemetry_max_body_bytes: int = Field(5 * 1024 * 1024, alias="GATEWAY_TELEMETRY_MAX_BODY_BYTES", gt=0)
    """Larger OTLP export bodies (compressed or decompressed) are not used (answered 200, counted)."""
    telemetry_groups: tuple[str, ...] = Field((), alias="GATEWAY_TELEMETRY_GROUPS")
    """Comma-separated groups the fleet series are labelled with, in priority order (a caller counts in the first it belongs to; others: `other`)."""
    telemetry_max_groups: int = Field(50, alias="GATEWAY_TELEMETRY_MAX_GROUPS", ge=1, le=1000)
    """Without GATEWAY_TELEMETRY_GROUPS: distinct caller groups labelled at most (a caller's first group; later ones: `other`)."""
    telemetry_top_users: int = Field(20, alias="GATEWAY_TELEMETRY_TOP_USERS", ge=0, le=1000)
    """Users with a label of their own in `gateway_fleet_user_cost_usd_total` (the top spenders; the rest: `other`)."""
    otlp_forward_urls: tuple[str, ...] = Field((), alias="GATEWAY_OTLP_FORWARD_URLS")
    """Comma-separated OTLP/HTTP collector base URLs accepted telemetry is forwarded to (`<url>/v1/metrics`...)."""
    otlp_forward_headers: SecretStr = Field(SecretStr(""), alias="GATEWAY_OTLP_FORWARD_HEADERS")
    """Headers sent to the collectors, `key=value,key2=value2` (percent-encoded values), e.g. `Authorization=Bearer%20...`."""
    otlp_forward_timeout_s: float = Field(10.0, alias="GATEWAY_OTLP_FORWARD_TIMEOUT_S", gt=0)
    """Bound on one forwarded export (connect, read and total), seconds."""
    otlp_forward_max_inflight: int = Field(128, alias="GATEWAY_OTLP_FORWARD_MAX_INFLIGHT", ge=1)
    """Exports in flight to one collector at most; more are dropped and counted."""
    otlp_forward_breaker_failures: int = Field(5, alias="GATEWAY_OTLP_FORWARD_BREAKER_FAILURES", ge=1)
    """Consecutive failures that open a collector's circuit breaker."""
    otlp_forward_breaker_open_s: float = Field(30.0, alias="GATEWAY_OTLP_FORWARD_BREAKER_OPEN_S", gt=0)
    """How long an open breaker drops a collector's exports, seconds."""

    @field_validator("telemetry_groups", mode="before")
    @classmethod
    def _ordered_list(cls, value: object) -> object:
        if isinstance(value, str):
            return tuple(dict.fromkeys(item.strip() for item in value.split(",") if item.strip()))
        return value

    @field_validator("otlp_forward_urls", mode="before")
    @classmethod
    def _collector_urls(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        urls = []
        for item in (part.strip() for part in value.split(",")):
            if item:
                url = http_url(item)
                if config_checks.without_userinfo(url) != url:
                    raise ValueError(
                        "put collector credentials in GATEWAY_OTLP_FORWARD_HEADERS, not in the URL"
                    )
                urls.append(url)
        return tuple(urls)

    @field_validator("otlp_forward_headers")
    @classmethod
    def _collector_headers(cls, value: SecretStr) -> SecretStr:
        from gateway.fleet.otlp_forward import parse_headers  # imports aiohttp only

        parse_headers(value.get_secret_value())
        return value
