"""Inbound authentication settings: the keys clients and metrics scrapers present."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, SecretStr

from gateway.keys import InboundKey, Role, parse_key_list
from gateway.settings.section import Flag, KeyList, ReadableFile, Section


class AuthSettings(Section):
    """The inbound keys (from the environment and a reloadable file)."""

    title: ClassVar[str] = "Inbound authentication"

    api_keys: KeyList = Field(SecretStr(""), alias="GATEWAY_API_KEYS")
    """Comma-separated inbound keys clients must present (team `default`)."""
    metrics_api_keys: KeyList = Field(SecretStr(""), alias="GATEWAY_METRICS_API_KEYS")
    """Comma-separated metrics keys: they read `/metrics` and nothing else (client keys never do)."""
    api_keys_file: ReadableFile = Field(None, alias="GATEWAY_API_KEYS_FILE")
    """File of inbound keys, one per line as `key [team] [role=client|metrics]`; `#` comments."""
    allow_unauthenticated: Flag = Field(False, alias="GATEWAY_ALLOW_UNAUTHENTICATED")
    """`1`: start without any inbound key (an open gateway, deliberately)."""
    api_keys_reload_s: float = Field(5.0, alias="GATEWAY_API_KEYS_RELOAD_S", ge=0, le=300)
    """Re-read GATEWAY_API_KEYS_FILE when it changes, polling this often, seconds (0: only on SIGHUP)."""

    @property
    def static_keys(self) -> tuple[InboundKey, ...]:
        """The keys from the environment (never reloaded): GATEWAY_API_KEYS, GATEWAY_METRICS_API_KEYS."""
        return (
            *parse_key_list(self.api_keys.get_secret_value()),
            *parse_key_list(self.metrics_api_keys.get_secret_value(), Role.METRICS),
        )
