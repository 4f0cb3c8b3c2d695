"""The gateway's configuration: read from the environment once, at start-up, into a frozen model.

Nothing else in the gateway reads ``os.environ``: ``Settings.from_environ`` takes the mapping
explicitly (the CLI passes ``os.environ`` once), validates every value and fails with a
``ConfigError`` whose message names the offending variable. Secrets are ``SecretStr`` so a repr or
log line of the settings never shows them.
"""

from __future__ import annotations

import enum
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from gateway.keys import InboundKey, parse_key_file, parse_key_list

TRUTHY = frozenset({"1", "true", "yes", "on"})
FALSY = frozenset({"", "0", "false", "no", "off"})


class ProviderName(enum.StrEnum):
    ANTHROPIC = "anthropic"
    BEDROCK = "bedrock"
    VERTEX = "vertex"
    FOUNDRY = "foundry"


class ConfigError(Exception):
    """A configuration value is missing or invalid; the message names the variable."""


def _flag(value: object) -> object:
    if isinstance(value, str):
        lowered = value.strip().lower()
        if lowered in TRUTHY:
            return True
        if lowered in FALSY:
            return False
    return value


def _existing_file(value: object) -> object:
    if value in (None, ""):
        return None
    path = Path(str(value)).expanduser()
    if not path.is_file():
        raise ValueError(f"file not found: {path}")
    if not os.access(path, os.R_OK):
        raise ValueError(f"file not readable: {path}")
    return path


def _http_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {value!r}")
    return value.rstrip("/")


class Settings(BaseModel):
    """Immutable snapshot of every setting the gateway uses. Field aliases are the env var names."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    # listener
    host: str = Field("127.0.0.1", alias="GATEWAY_HOST")
    port: int = Field(8080, alias="GATEWAY_PORT", ge=0, le=65535)
    max_body_bytes: int = Field(32 * 1024 * 1024, alias="GATEWAY_MAX_BODY_BYTES", gt=0)

    # inbound authentication
    api_keys: SecretStr = Field(SecretStr(""), alias="GATEWAY_API_KEYS")
    api_keys_file: Path | None = Field(None, alias="GATEWAY_API_KEYS_FILE")
    allow_unauthenticated: bool = Field(False, alias="GATEWAY_ALLOW_UNAUTHENTICATED")
    _inbound_keys: tuple[InboundKey, ...] = PrivateAttr(())

    # first-party upstream
    anthropic_api_key: SecretStr | None = Field(None, alias="ANTHROPIC_API_KEY")
    anthropic_auth_token: SecretStr | None = Field(None, alias="ANTHROPIC_AUTH_TOKEN")
    anthropic_base_url: str = Field("https://api.anthropic.com", alias="ANTHROPIC_BASE_URL")

    # provider selection: GATEWAY_PROVIDER, else the Claude Code switches in this order
    provider_choice: ProviderName | None = Field(None, alias="GATEWAY_PROVIDER")
    use_bedrock: bool = Field(False, alias="CLAUDE_CODE_USE_BEDROCK")
    use_vertex: bool = Field(False, alias="CLAUDE_CODE_USE_VERTEX")
    use_foundry: bool = Field(False, alias="CLAUDE_CODE_USE_FOUNDRY")

    # AWS Bedrock (the credential chain itself is botocore's: env keys, profile, web identity...)
    aws_region: str | None = Field(None, validation_alias=AliasChoices("AWS_REGION", "AWS_DEFAULT_REGION"))
    aws_profile: str | None = Field(None, alias="AWS_PROFILE")
    aws_bearer_token_bedrock: SecretStr | None = Field(None, alias="AWS_BEARER_TOKEN_BEDROCK")
    bedrock_base_url: str | None = Field(None, alias="ANTHROPIC_BEDROCK_BASE_URL")
    bedrock_profile_prefix: str | None = Field(None, alias="GATEWAY_BEDROCK_PROFILE_PREFIX")

    # Google Vertex AI
    vertex_project_id: str | None = Field(None, alias="ANTHROPIC_VERTEX_PROJECT_ID")
    vertex_region: str | None = Field(None, alias="CLOUD_ML_REGION")
    google_application_credentials: Path | None = Field(None, alias="GOOGLE_APPLICATION_CREDENTIALS")
    vertex_base_url: str | None = Field(None, alias="ANTHROPIC_VERTEX_BASE_URL")

    # Microsoft Foundry
    foundry_resource: str | None = Field(None, alias="ANTHROPIC_FOUNDRY_RESOURCE")
    foundry_base_url: str | None = Field(None, alias="ANTHROPIC_FOUNDRY_BASE_URL")
    foundry_api_key: SecretStr | None = Field(None, alias="ANTHROPIC_FOUNDRY_API_KEY")
    foundry_entra_scope: str = Field("https://ai.azure.com/.default", alias="GATEWAY_FOUNDRY_ENTRA_SCOPE")

    # model names and beta policy (JSON text or a path to a JSON file)
    model_map: dict[str, str] = Field(default_factory=dict, alias="GATEWAY_MODEL_MAP")
    beta_policy: dict[str, list[str]] = Field(default_factory=dict, alias="GATEWAY_BETA_POLICY")

    # egress
    https_proxy: str | None = Field(
        None, validation_alias=AliasChoices("HTTPS_PROXY", "https_proxy"), repr=False
    )
    http_proxy: str | None = Field(
        None, validation_alias=AliasChoices("HTTP_PROXY", "http_proxy"), repr=False
    )
    no_proxy: str = Field("", validation_alias=AliasChoices("NO_PROXY", "no_proxy"))
    ca_bundle: Path | None = Field(None, validation_alias=AliasChoices("GATEWAY_CA_BUNDLE", "SSL_CERT_FILE"))
    client_cert: Path | None = Field(None, alias="GATEWAY_CLIENT_CERT")
    client_key: Path | None = Field(None, alias="GATEWAY_CLIENT_KEY")
    upstream_pool_size: int = Field(512, alias="GATEWAY_UPSTREAM_POOL_SIZE", gt=0)
    upstream_connect_timeout_s: float = Field(10.0, alias="GATEWAY_UPSTREAM_CONNECT_TIMEOUT_S", gt=0)
    first_byte_timeout_s: float = Field(600.0, alias="GATEWAY_FIRST_BYTE_TIMEOUT_S", gt=0)
    downstream_ping_s: float = Field(15.0, alias="GATEWAY_DOWNSTREAM_PING_S", gt=0)

    # resilience: stream idle watchdog, non-streaming fallback, bounded retries, model fallback
    stream_idle_warning_s: float = Field(45.0, alias="GATEWAY_STREAM_IDLE_WARNING_S", gt=0)
    stream_idle_timeout_s: float = Field(90.0, alias="GATEWAY_STREAM_IDLE_TIMEOUT_S", gt=0)
    nonstreaming_fallback: bool = Field(True, alias="GATEWAY_NONSTREAMING_FALLBACK")
    max_retries: int = Field(10, alias="GATEWAY_MAX_RETRIES", ge=0)
    max_retry_delay_s: float = Field(60.0, alias="GATEWAY_MAX_RETRY_DELAY_S", gt=0)
    request_deadline_s: float = Field(600.0, alias="GATEWAY_REQUEST_DEADLINE_S", gt=0)
    fallback_model: str | None = Field(None, alias="GATEWAY_FALLBACK_MODEL")
    fallback_after_overloads: int = Field(3, alias="GATEWAY_FALLBACK_AFTER_OVERLOADS", ge=1)
    # the retry budget for clients that retry themselves (gateway.retry_budget)
    client_retrying_max_retries: int = Field(1, alias="GATEWAY_CLIENT_RETRYING_MAX_RETRIES", ge=0)
    client_retry_limit: int = Field(10, alias="GATEWAY_CLIENT_RETRY_LIMIT", ge=0)
    client_retry_window_s: float = Field(300.0, alias="GATEWAY_CLIENT_RETRY_WINDOW_S", ge=0)

    # operations
    log_level: str = Field("INFO", alias="GATEWAY_LOG_LEVEL")
    # observability: request bodies in the access log (off: never any prompt content), and a JSON
    # file overriding the built-in price table (see gateway.pricing)
    log_bodies: bool = Field(False, alias="GATEWAY_LOG_BODIES")
    pricing_file: Path | None = Field(None, alias="GATEWAY_PRICING_FILE")
    # graceful shutdown (service.serve): on SIGTERM readiness fails at once; after the delay the
    # listener closes; in-flight requests get until the timeout (counted from the signal)
    drain_timeout_s: float = Field(60.0, alias="GATEWAY_DRAIN_TIMEOUT_S", ge=0)
    drain_delay_s: float = Field(0.0, alias="GATEWAY_DRAIN_DELAY_S", ge=0)

    # shared session store ("memory" or a redis:// URL; see gateway.cache): replicas share it
    session_store: str = Field("memory", alias="GATEWAY_SESSION_STORE", repr=False)
    session_idle_s: float = Field(7200.0, alias="GATEWAY_SESSION_IDLE_S", gt=0)
    session_max: int = Field(100_000, alias="GATEWAY_SESSION_MAX", gt=0)
    session_store_timeout_s: float = Field(0.25, alias="GATEWAY_SESSION_STORE_TIMEOUT_S", gt=0)
    latched_betas: frozenset[str] = Field(frozenset(), alias="GATEWAY_LATCHED_BETAS")
    auto_cache: bool = Field(False, alias="GATEWAY_AUTO_CACHE")
    normalise_billing_header: frozenset[str] = Field(
        frozenset({"bedrock", "vertex"}), alias="GATEWAY_NORMALISE_BILLING_HEADER"
    )

    @field_validator(
        "allow_unauthenticated",
        "use_bedrock",
        "use_vertex",
        "use_foundry",
        "nonstreaming_fallback",
        "log_bodies",
        mode="before",
    )
    @classmethod
    def _parse_flag(cls, value: object) -> object:
        return _flag(value)

    @field_validator(
        "api_keys_file",
        "ca_bundle",
        "client_cert",
        "client_key",
        "google_application_credentials",
        "pricing_file",
        mode="before",
    )
    @classmethod
    def _check_file(cls, value: object) -> object:
        return _existing_file(value)

    @field_validator("anthropic_base_url")
    @classmethod
    def _check_base_url(cls, value: str) -> str:
        return _http_url(value)

    @field_validator("bedrock_base_url", "vertex_base_url", "foundry_base_url", mode="before")
    @classmethod
    def _check_optional_url(cls, value: object) -> object:
        if value in (None, ""):
            return None
        return _http_url(str(value))

    @field_validator(
        "aws_region",
        "aws_profile",
        "vertex_project_id",
        "vertex_region",
        "foundry_resource",
        "bedrock_profile_prefix",
        "provider_choice",
        "fallback_model",
        mode="before",
    )
    @classmethod
    def _blank_is_none(cls, value: object) -> object:
        if isinstance(value, str):
            value = value.strip()
            return value or None
        return value

    @field_validator("latched_betas", "normalise_billing_header", mode="before")
    @classmethod
    def _comma_list(cls, value: object) -> object:
        if isinstance(value, str):
            lowered = value.strip().lower()
            if lowered in FALSY:
                return frozenset()
            return frozenset(item.strip() for item in value.split(",") if item.strip())
        return value

    @field_validator("session_store")
    @classmethod
    def _check_store(cls, value: str) -> str:
        if value != "memory" and not value.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError(f"expected 'memory' or a redis:// URL, got {value!r}")
        return value

    @field_validator("model_map", "beta_policy", mode="before")
    @classmethod
    def _json_or_file(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        text = value.strip()
        if not text:
            return {}
        if not text.startswith("{"):
            path = Path(text).expanduser()
            if not path.is_file():
                raise ValueError(f"neither a JSON object nor a readable file: {text!r}")
            text = path.read_text(encoding="utf-8")
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"invalid JSON: {exc}") from None

    @field_validator("https_proxy", "http_proxy", mode="before")
    @classmethod
    def _check_proxy(cls, value: object) -> object:
        if value in (None, ""):
            return None
        text = str(value)
        if "://" not in text:  # curl convention: a bare host:port means http://
            text = "http://" + text
        return _http_url(text)

    @field_validator(
        "anthropic_api_key",
        "anthropic_auth_token",
        "aws_bearer_token_bedrock",
        "foundry_api_key",
        mode="before",
    )
    @classmethod
    def _empty_is_none(cls, value: object) -> object:
        return None if value == "" else value

    @field_validator("pricing_file")
    @classmethod
    def _check_pricing(cls, value: Path | None) -> Path | None:
        if value is not None:
            from gateway.pricing import load_price_table  # imports this module

            load_price_table(value)  # a PricingError is a ValueError: reported against the variable
        return value

    @field_validator("log_level")
    @classmethod
    def _check_level(cls, value: str) -> str:
        level = value.upper()
        if level not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
            raise ValueError(f"unknown log level {value!r}")
        return level

    @model_validator(mode="after")
    def _load_keys(self) -> Settings:
        keys = list(parse_key_list(self.api_keys.get_secret_value()))
        if self.api_keys_file is not None:
            try:
                keys.extend(parse_key_file(self.api_keys_file))
            except (OSError, UnicodeDecodeError, ValueError) as exc:
                raise ValueError(f"GATEWAY_API_KEYS_FILE: {exc}") from None
        self._inbound_keys = tuple(keys)
        if self.client_key is not None and self.client_cert is None:
            raise ValueError("GATEWAY_CLIENT_KEY is set but GATEWAY_CLIENT_CERT is not")
        self._check_provider_settings()
        if self.stream_idle_warning_s > self.stream_idle_timeout_s:
            raise ValueError("GATEWAY_STREAM_IDLE_WARNING_S: must not exceed GATEWAY_STREAM_IDLE_TIMEOUT_S")
        if self.drain_delay_s > self.drain_timeout_s:
            raise ValueError("GATEWAY_DRAIN_DELAY_S: must not exceed GATEWAY_DRAIN_TIMEOUT_S")
        return self

    @property
    def provider(self) -> ProviderName:
        """The upstream this deployment targets, chosen once from the snapshot."""
        if self.provider_choice is not None:
            return self.provider_choice
        if self.use_bedrock:
            return ProviderName.BEDROCK
        if self.use_vertex:
            return ProviderName.VERTEX
        if self.use_foundry:
            return ProviderName.FOUNDRY
        return ProviderName.ANTHROPIC

    def _check_provider_settings(self) -> None:
        provider = self.provider
        if provider is ProviderName.BEDROCK and self.aws_region is None:
            raise ValueError("AWS_REGION: required when the provider is bedrock (or set AWS_DEFAULT_REGION)")
        if provider is ProviderName.VERTEX and self.vertex_region is None:
            raise ValueError("CLOUD_ML_REGION: required when the provider is vertex")
        if provider is ProviderName.FOUNDRY:
            if self.foundry_resource is None and self.foundry_base_url is None:
                raise ValueError(
                    "ANTHROPIC_FOUNDRY_RESOURCE: required when the provider is foundry "
                    "(or set ANTHROPIC_FOUNDRY_BASE_URL)"
                )
            if self.foundry_resource is not None and self.foundry_base_url is not None:
                raise ValueError(
                    "ANTHROPIC_FOUNDRY_RESOURCE: set either it or ANTHROPIC_FOUNDRY_BASE_URL, not both"
                )

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Settings:
        """Validate the given environment; raise ``ConfigError`` naming the first bad variable."""
        try:
            return cls.model_validate(dict(environ))
        except ValidationError as exc:
            raise ConfigError(_describe(exc)) from None

    def require_startable(self) -> None:
        """Checks that only matter for serving (not for tools that read the settings)."""
        if not self.inbound_keys and not self.allow_unauthenticated:
            raise ConfigError(
                "GATEWAY_API_KEYS / GATEWAY_API_KEYS_FILE: no inbound API key configured; refusing to "
                "start an open gateway (set GATEWAY_ALLOW_UNAUTHENTICATED=1 to allow it deliberately)"
            )

    @property
    def inbound_keys(self) -> tuple[InboundKey, ...]:
        return self._inbound_keys

    @property
    def upstream_credential(self) -> SecretStr | None:
        return self.anthropic_api_key or self.anthropic_auth_token

    def public_summary(self) -> dict[str, Any]:
        """What start-up logs: every setting, secrets replaced by whether they are set."""
        return {
            "host": self.host,
            "port": self.port,
            "inbound_keys": len(self.inbound_keys),
            "allow_unauthenticated": self.allow_unauthenticated,
            "provider": self.provider.value,
            "anthropic_base_url": self.anthropic_base_url,
            "upstream_credential": (
                "ANTHROPIC_API_KEY"
                if self.anthropic_api_key
                else "ANTHROPIC_AUTH_TOKEN"
                if self.anthropic_auth_token
                else "none"
            ),
            "https_proxy": _strip_userinfo(self.https_proxy),
            "http_proxy": _strip_userinfo(self.http_proxy),
            "no_proxy": self.no_proxy,
            "ca_bundle": str(self.ca_bundle) if self.ca_bundle else None,
            "client_cert": str(self.client_cert) if self.client_cert else None,
            "max_body_bytes": self.max_body_bytes,
        }


def _strip_userinfo(url: str | None) -> str | None:
    if url is None:
        return None
    parts = urlsplit(url)
    if parts.username is None:
        return url
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return parts._replace(netloc=netloc).geturl()


def _alias_for(loc: tuple[int | str, ...]) -> str:
    if not loc:
        return "configuration"
    name = str(loc[0])
    field = Settings.model_fields.get(name)
    if field is not None:
        if field.alias:
            return field.alias
        if isinstance(field.validation_alias, AliasChoices):
            return " / ".join(str(choice) for choice in field.validation_alias.choices)
    return name


def _describe(exc: ValidationError) -> str:
    error = exc.errors(include_url=False, include_input=False)[0]
    message = str(error["msg"]).removeprefix("Value error, ")
    loc = tuple(error["loc"])
    if not loc:  # model-level validator: the message names the variable itself
        return message
    return f"{_alias_for(loc)}: {message}"
