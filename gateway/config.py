"""The gateway's configuration: read from the environment once, at start-up, into a frozen model.

Nothing else in the gateway reads ``os.environ``: ``Settings.from_environ`` takes the mapping
explicitly (the CLI passes ``os.environ`` once), validates every value and fails with a
``ConfigError`` holding one line per problem, each naming the offending variable: every bad value,
every failed cross-field check and every unknown ``GATEWAY_*`` variable, all at once (see
:mod:`gateway.config_checks`). Secrets are ``SecretStr`` so a repr or log line of the settings never
shows them, and no problem line shows a secret or URL userinfo.

Each field's docstring is its one-line description: ``switchyard serve --help`` lists them
(:mod:`gateway.config_docs`). A cross-field check is a method registered in
``Settings._cross_field_checks`` with the fields it reads; it raises ``ValueError("VARIABLE: ...")``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from gateway import config_checks, config_rules
from gateway.cache.budget import DEFAULT_SESSION_MAX
from gateway.config_values import FALSY, TRUTHY, existing_file, flag, http_url
from gateway.keys import InboundKey, Role, parse_key_file, parse_key_list
from gateway.provider_names import ProviderName as ProviderName  # re-exported (the leaf is its home)


class ConfigError(Exception):
    """Configuration values are missing or invalid: one line per problem, each naming the variable."""

    def __init__(self, *problems: str) -> None:
        super().__init__("\n".join(problems))
        self.problems: tuple[str, ...] = problems


UPSTREAM_URL_FIELDS = frozenset(
    {"anthropic_base_url", "bedrock_base_url", "bedrock_control_url", "vertex_base_url", "foundry_base_url"}
)  # credentials (userinfo) in these are dropped: the upstream credential has its own variables
FAILED_FIELDS = "failed_fields"  # validation context: fields that failed (their checks are skipped)
SERVING = "serving"  # validation context: also run the checks only ``switchyard serve`` needs


class Settings(BaseModel):
    """Immutable snapshot of every setting the gateway uses. Field aliases are the env var names."""

    model_config = ConfigDict(frozen=True, extra="ignore")  # docstrings: config_docs

    # listener
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

    # inbound authentication
    api_keys: SecretStr = Field(SecretStr(""), alias="GATEWAY_API_KEYS")
    """Comma-separated inbound keys clients must present (team `default`)."""
    metrics_api_keys: SecretStr = Field(SecretStr(""), alias="GATEWAY_METRICS_API_KEYS")
    """Comma-separated metrics keys: they read `/metrics` and nothing else (client keys never do)."""
    api_keys_file: Path | None = Field(None, alias="GATEWAY_API_KEYS_FILE")
    """File of inbound keys, one per line as `key [team] [role=client|metrics]`; `#` comments."""
    allow_unauthenticated: bool = Field(False, alias="GATEWAY_ALLOW_UNAUTHENTICATED")
    """`1`: start without any inbound key (an open gateway, deliberately)."""
    api_keys_reload_s: float = Field(5.0, alias="GATEWAY_API_KEYS_RELOAD_S", ge=0, le=300)
    """Re-read GATEWAY_API_KEYS_FILE when it changes, polling this often, seconds (0: only on SIGHUP)."""
    _inbound_keys: tuple[InboundKey, ...] = PrivateAttr(())
    _aws_variables: frozenset[str] = PrivateAttr(frozenset())  # names set (for the summary)
    _dropped_url_credentials: frozenset[str] = PrivateAttr(frozenset())  # variables (for the summary)

    # first-party upstream
    anthropic_api_key: SecretStr | None = Field(None, alias="ANTHROPIC_API_KEY")
    """First-party API key (sent as `x-api-key`)."""
    anthropic_auth_token: SecretStr | None = Field(None, alias="ANTHROPIC_AUTH_TOKEN")
    """First-party bearer token (sent as `Authorization: Bearer`)."""
    anthropic_base_url: str = Field("https://api.anthropic.com", alias="ANTHROPIC_BASE_URL")
    """First-party base URL."""

    # provider selection: GATEWAY_PROVIDER, else the Claude Code switches in this order
    provider_choice: ProviderName | None = Field(None, alias="GATEWAY_PROVIDER")
    """Upstream: `anthropic`, `bedrock`, `vertex` or `foundry` (unset: the CLAUDE_CODE_USE_* switches)."""
    use_bedrock: bool = Field(False, alias="CLAUDE_CODE_USE_BEDROCK")
    """`1`: Bedrock is the upstream (when GATEWAY_PROVIDER is unset)."""
    use_vertex: bool = Field(False, alias="CLAUDE_CODE_USE_VERTEX")
    """`1`: Vertex AI is the upstream (when GATEWAY_PROVIDER is unset)."""
    use_foundry: bool = Field(False, alias="CLAUDE_CODE_USE_FOUNDRY")
    """`1`: Foundry is the upstream (when GATEWAY_PROVIDER is unset)."""

    # AWS Bedrock (the credential chain itself is botocore's: env keys, profile, web identity...)
    aws_region: str | None = Field(None, validation_alias=AliasChoices("AWS_REGION", "AWS_DEFAULT_REGION"))
    """Bedrock region (required for bedrock)."""
    aws_profile: str | None = Field(None, alias="AWS_PROFILE")
    """AWS shared-config profile the credential chain uses."""
    aws_bearer_token_bedrock: SecretStr | None = Field(None, alias="AWS_BEARER_TOKEN_BEDROCK")
    """Bedrock API key (`Authorization: Bearer`, no SigV4)."""
    bedrock_base_url: str | None = Field(None, alias="ANTHROPIC_BEDROCK_BASE_URL")
    """Bedrock runtime endpoint (unset: `https://bedrock-runtime.{region}.amazonaws.com`)."""
    bedrock_profile_prefix: str | None = Field(None, alias="GATEWAY_BEDROCK_PROFILE_PREFIX")
    """Cross-region inference-profile prefix of mapped ids (unset: from the region; `none`: base ids)."""
    bedrock_control_url: str | None = Field(None, alias="GATEWAY_BEDROCK_CONTROL_URL")
    """Bedrock control-plane URL for model discovery (default `https://bedrock.{AWS_REGION}.amazonaws.com`)."""

    # Google Vertex AI
    vertex_project_id: str | None = Field(None, alias="ANTHROPIC_VERTEX_PROJECT_ID")
    """Vertex project (unset: the Google credentials' project)."""
    vertex_region: str | None = Field(None, alias="CLOUD_ML_REGION")
    """Vertex region (required for vertex; `global`, `us`, `eu` supported)."""
    google_application_credentials: Path | None = Field(None, alias="GOOGLE_APPLICATION_CREDENTIALS")
    """Service-account key file (unset: Application Default Credentials)."""
    vertex_base_url: str | None = Field(None, alias="ANTHROPIC_VERTEX_BASE_URL")
    """Vertex endpoint including `/v1` (unset: the regional host)."""

    # Microsoft Foundry
    foundry_resource: str | None = Field(None, alias="ANTHROPIC_FOUNDRY_RESOURCE")
    """Foundry resource name (or set ANTHROPIC_FOUNDRY_BASE_URL)."""
    foundry_base_url: str | None = Field(None, alias="ANTHROPIC_FOUNDRY_BASE_URL")
    """Foundry base URL ending in `/anthropic` (or set ANTHROPIC_FOUNDRY_RESOURCE)."""
    foundry_api_key: SecretStr | None = Field(None, alias="ANTHROPIC_FOUNDRY_API_KEY")
    """Foundry key (`x-api-key` and `api-key`); unset: an Entra ID token from azure-identity."""
    foundry_entra_scope: str = Field("https://ai.azure.com/.default", alias="GATEWAY_FOUNDRY_ENTRA_SCOPE")
    """Entra ID scope of Foundry tokens."""

    # model names and beta policy (JSON text or a path to a JSON file)
    model_map: dict[str, str] = Field(default_factory=dict, alias="GATEWAY_MODEL_MAP")
    """JSON object (or a path to one) mapping client model names to upstream ids."""
    beta_policy: dict[str, list[str]] = Field(default_factory=dict, alias="GATEWAY_BETA_POLICY")
    """JSON object `{provider: [betas]}` replacing a provider's accepted `anthropic-beta` list."""
    model_discovery: bool = Field(False, alias="GATEWAY_MODEL_DISCOVERY")
    """`1`: discover the models the cloud serves from its control plane (Bedrock, Vertex AI)."""
    model_discovery_interval_s: float = Field(3600.0, alias="GATEWAY_MODEL_DISCOVERY_INTERVAL_S", ge=0)
    """Re-read the discovered model catalogue this often, seconds (0: at start-up only)."""
    model_discovery_timeout_s: float = Field(10.0, alias="GATEWAY_MODEL_DISCOVERY_TIMEOUT_S", gt=0)
    """Bound on one model-discovery read, seconds."""
    fold_system_messages: frozenset[str] = Field(frozenset(), alias="GATEWAY_FOLD_SYSTEM_MESSAGES")
    """Upstream models that refuse `role: "system"` messages (`*` or fnmatch patterns): folded into user turns."""

    # egress
    https_proxy: str | None = Field(
        None, validation_alias=AliasChoices("HTTPS_PROXY", "https_proxy"), repr=False
    )
    """Egress proxy for https upstreams (`host:port` means `http://host:port`)."""
    http_proxy: str | None = Field(
        None, validation_alias=AliasChoices("HTTP_PROXY", "http_proxy"), repr=False
    )
    """Egress proxy for http upstreams."""
    no_proxy: str = Field("", validation_alias=AliasChoices("NO_PROXY", "no_proxy"))
    """Hosts that bypass the proxy: domains, `host:port`, IPs, CIDR ranges, `*`."""
    ca_bundle: Path | None = Field(None, validation_alias=AliasChoices("GATEWAY_CA_BUNDLE", "SSL_CERT_FILE"))
    """CA bundle (PEM) for upstream TLS, e.g. a TLS-inspection CA (unset: the system store)."""
    client_cert: Path | None = Field(None, alias="GATEWAY_CLIENT_CERT")
    """Client certificate (PEM) for upstream mTLS (with its key, or GATEWAY_CLIENT_KEY)."""
    client_key: Path | None = Field(None, alias="GATEWAY_CLIENT_KEY")
    """Unencrypted PEM private key of GATEWAY_CLIENT_CERT."""
    upstream_pool_size: int = Field(512, alias="GATEWAY_UPSTREAM_POOL_SIZE", gt=0)
    """Pooled keep-alive connections to the upstream."""
    team_max_inflight: int = Field(0, alias="GATEWAY_TEAM_MAX_INFLIGHT", ge=0)
    """Upstream requests one team may have in flight; more get `429` (0: half the pool once keys name two or more teams)."""
    upstream_connect_timeout_s: float = Field(10.0, alias="GATEWAY_UPSTREAM_CONNECT_TIMEOUT_S", gt=0)
    """TCP/TLS connect timeout, seconds."""
    first_byte_timeout_s: float = Field(600.0, alias="GATEWAY_FIRST_BYTE_TIMEOUT_S", gt=0)
    """Wait for the upstream's response headers, seconds; then `504 timeout_error`."""
    downstream_ping_s: float = Field(15.0, alias="GATEWAY_DOWNSTREAM_PING_S", gt=0)
    """While the upstream is silent, send the client `event: ping` this often, seconds."""
    write_stall_timeout_s: float = Field(30.0, alias="GATEWAY_WRITE_STALL_TIMEOUT_S", gt=0)
    """A write the client does not take in this long closes its connection and its upstream request, seconds."""
    credential_failures_not_ready: int = Field(3, alias="GATEWAY_CREDENTIAL_FAILURES_NOT_READY", ge=1)
    """/readyz turns not-ready after this many consecutive failed upstream-credential fetches."""
    credential_recheck_s: float = Field(30.0, alias="GATEWAY_CREDENTIAL_RECHECK_S", gt=0)
    """While not ready, /readyz retries the credential fetch at most this often, seconds."""

    # resilience: stream idle watchdog, non-streaming fallback, bounded retries, model fallback
    stream_idle_warning_s: float = Field(45.0, alias="GATEWAY_STREAM_IDLE_WARNING_S", gt=0)
    """Seconds without an upstream data event before a stream is logged as idle."""
    stream_idle_timeout_s: float = Field(90.0, alias="GATEWAY_STREAM_IDLE_TIMEOUT_S", gt=0)
    """Seconds without an upstream data event before a stream is aborted."""
    nonstreaming_fallback: bool = Field(True, alias="GATEWAY_NONSTREAMING_FALLBACK")
    """Retry a stream that failed before any content once as a non-streaming request."""
    max_retries: int = Field(10, alias="GATEWAY_MAX_RETRIES", ge=0)
    """Retries of 408/409/429/5xx/529, connection errors and timeouts, for a client that does not retry itself."""
    max_retry_delay_s: float = Field(60.0, alias="GATEWAY_MAX_RETRY_DELAY_S", gt=0)
    """Cap on one retry wait, seconds."""
    request_deadline_s: float = Field(600.0, alias="GATEWAY_REQUEST_DEADLINE_S", gt=0)
    """No retry starts this many seconds after the request arrived."""
    fallback_model: str | None = Field(None, alias="GATEWAY_FALLBACK_MODEL")
    """Model to switch to after GATEWAY_FALLBACK_AFTER_OVERLOADS consecutive 529s."""
    fallback_after_overloads: int = Field(3, alias="GATEWAY_FALLBACK_AFTER_OVERLOADS", ge=1)
    """Consecutive 529s before switching to GATEWAY_FALLBACK_MODEL."""
    # the retry budget for clients that retry themselves (gateway.retry_budget)
    client_retrying_max_retries: int = Field(1, alias="GATEWAY_CLIENT_RETRYING_MAX_RETRIES", ge=0)
    """Retries under the first attempt of a client that retries itself (it sends
    x-stainless-retry-count, or repeats a request that just failed); its n-th retry gets this minus n."""
    client_retry_limit: int = Field(10, alias="GATEWAY_CLIENT_RETRY_LIMIT", ge=0)
    """After a client's this-many-th retry, its final retryable error says x-should-retry: false."""
    client_retry_window_s: float = Field(300.0, alias="GATEWAY_CLIENT_RETRY_WINDOW_S", ge=0)
    """Seconds a request answered with a retryable error is remembered (as a hash) to recognise its
    client's retries; 0: by x-stainless-retry-count alone."""

    # operations
    log_level: str = Field("INFO", alias="GATEWAY_LOG_LEVEL")
    """`DEBUG`, `INFO`, `WARNING`, `ERROR` or `CRITICAL` (JSON lines on stderr)."""
    # observability: request bodies in the access log (off: never any prompt content), and a JSON
    # file overriding the built-in price table (see gateway.pricing)
    log_bodies: bool = Field(False, alias="GATEWAY_LOG_BODIES")
    """`1`: request/response bodies in the access log (off: no prompt content is logged)."""
    pricing_file: Path | None = Field(None, alias="GATEWAY_PRICING_FILE")
    """JSON file overriding the price table behind `gateway_cost_usd_total`."""
    # graceful shutdown (service.serve): on SIGTERM readiness fails at once; after the delay the
    # listener closes; in-flight requests get until the timeout (counted from the signal)
    drain_timeout_s: float = Field(60.0, alias="GATEWAY_DRAIN_TIMEOUT_S", ge=0)
    """On SIGTERM, in-flight requests get this long (seconds, from the signal)."""
    drain_delay_s: float = Field(0.0, alias="GATEWAY_DRAIN_DELAY_S", ge=0)
    """On SIGTERM, the listener stays open this long after readiness fails, seconds."""

    # shared session store ("memory" or a redis:// URL; see gateway.cache): replicas share it
    session_store: str = Field("memory", alias="GATEWAY_SESSION_STORE", repr=False)
    """`memory`, or a `redis://` URL shared by replicas."""
    session_idle_s: float = Field(7200.0, alias="GATEWAY_SESSION_IDLE_S", gt=0)
    """Idle expiry of sessions, seconds."""
    session_max: int = Field(DEFAULT_SESSION_MAX, alias="GATEWAY_SESSION_MAX", gt=0)
    """Bound on the sessions kept in memory (the default fits a 64 MiB budget)."""
    session_max_per_team: int | None = Field(None, alias="GATEWAY_SESSION_MAX_PER_TEAM", gt=0)
    """Sessions one team may keep (unset: GATEWAY_SESSION_MAX shared equally by the teams with keys)."""
    session_store_timeout_s: float = Field(0.25, alias="GATEWAY_SESSION_STORE_TIMEOUT_S", gt=0)
    """Redis timeout, seconds; on failure requests continue on the in-memory view."""
    latched_betas: frozenset[str] = Field(frozenset(), alias="GATEWAY_LATCHED_BETAS")
    """Comma-separated betas latched per session in addition to the defaults."""
    auto_cache: bool = Field(False, alias="GATEWAY_AUTO_CACHE")
    """`1`: place cache breakpoints on requests that carry none."""
    normalise_billing_header: frozenset[str] = Field(
        frozenset({"bedrock", "vertex"}), alias="GATEWAY_NORMALISE_BILLING_HEADER"
    )
    """Comma-separated upstreams where Claude Code's per-request billing value is pinned."""

    # --- fleet policy (issue 17) ---
    # gateway.fleet: model rules, spend caps, rate limits and managed settings per user and group.
    # Counters live in this process, or in Redis when GATEWAY_SESSION_STORE is a redis:// URL.
    policy_file: Path | None = Field(None, alias="GATEWAY_POLICY_FILE")
    """YAML or JSON policy file: models, spend caps, rate limits, managed settings per user and group (unset: everything allowed, no caps)."""
    policy_reload_s: float = Field(5.0, alias="GATEWAY_POLICY_RELOAD_S", ge=0, le=300)
    """Re-read GATEWAY_POLICY_FILE when it changes, polling this often, seconds (0: only on SIGHUP); also how often replicas take admin-set caps from Redis."""
    policy_counters_fail: Literal["open", "closed"] = Field("open", alias="GATEWAY_POLICY_COUNTERS_FAIL")
    """When the spend/rate counters (Redis) cannot answer: `open` lets requests through unmetered, `closed` refuses them (`429`, `fetch_error`)."""
    # --- end fleet policy ---

    @field_validator(
        "allow_unauthenticated",
        "use_bedrock",
        "use_vertex",
        "use_foundry",
        "nonstreaming_fallback",
        "log_bodies",
        "model_discovery",
        mode="before",
    )
    @classmethod
    def _parse_flag(cls, value: object) -> object:
        return flag(value)

    @field_validator(
        "api_keys_file",
        "ca_bundle",
        "client_cert",
        "client_key",
        "google_application_credentials",
        "pricing_file",
        "policy_file",
        mode="before",
    )
    @classmethod
    def _check_file(cls, value: object) -> object:
        return existing_file(value)

    @field_validator("ca_bundle")
    @classmethod
    def _check_ca_pem(cls, value: Path | None) -> Path | None:
        if value is not None:
            config_checks.check_ca_bundle(value)
        return value

    @field_validator("client_cert")
    @classmethod
    def _check_cert_pem(cls, value: Path | None) -> Path | None:
        if value is not None:
            config_checks.check_certificate(value)
        return value

    @field_validator("anthropic_base_url")
    @classmethod
    def _check_base_url(cls, value: str) -> str:
        return config_checks.without_userinfo(http_url(value))  # never sent upstream (nor logged)

    @field_validator(
        "bedrock_base_url", "vertex_base_url", "foundry_base_url", "bedrock_control_url", mode="before"
    )
    @classmethod
    def _check_optional_url(cls, value: object) -> object:
        if value in (None, ""):
            return None
        return config_checks.without_userinfo(http_url(str(value)))

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

    @field_validator("fold_system_messages", mode="before")
    @classmethod
    def _fold_targets(cls, value: object) -> object:
        if isinstance(value, str) and value.strip().lower() in TRUTHY:
            return frozenset({"*"})
        return cls._comma_list(value)

    @field_validator("session_store")
    @classmethod
    def _check_store(cls, value: str) -> str:
        if value != "memory":
            config_checks.check_redis_url(value)
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
        return http_url(text)

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

    @field_validator(
        "api_keys",
        "metrics_api_keys",
        "anthropic_api_key",
        "anthropic_auth_token",
        "aws_bearer_token_bedrock",
        "foundry_api_key",
    )
    @classmethod
    def _check_header_safe(cls, value: SecretStr | None, info: ValidationInfo) -> SecretStr | None:
        if value is not None:
            listed = info.field_name in ("api_keys", "metrics_api_keys")
            config_checks.check_header_safe(value.get_secret_value(), listed=listed)
        return value

    @field_validator("pricing_file")
    @classmethod
    def _check_pricing(cls, value: Path | None) -> Path | None:
        if value is not None:
            from gateway.pricing import load_price_table  # imports this module

            load_price_table(value)  # a PricingError is a ValueError: reported against the variable
        return value

    @field_validator("policy_file")
    @classmethod
    def _check_policy(cls, value: Path | None) -> Path | None:
        if value is not None:
            from gateway.fleet.policy_file import load_policy

            load_policy(value)  # a PolicyError is a ValueError: one line per problem, naming the field
        return value

    @field_validator("log_level")
    @classmethod
    def _check_level(cls, value: str) -> str:
        level = value.upper()
        if level not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
            raise ValueError(f"unknown log level {value!r}")
        return level

    @model_validator(mode="after")
    def _check_combinations(self, info: ValidationInfo) -> Settings:
        """Run every cross-field check whose fields all validated; report all their problems."""
        context = info.context or {}
        failed = set(context.get(FAILED_FIELDS, ()))
        problems = []
        for fields, check in self._cross_field_checks(serving=bool(context.get(SERVING))):
            if failed.isdisjoint(fields):
                try:
                    check()
                except ValueError as exc:
                    problems.append(str(exc))
                    failed |= fields  # later checks of these fields would only repeat it
        if problems:  # not a ValueError: pydantic lets it through unwrapped, lines intact
            raise ConfigError(*problems)
        return self

    def _cross_field_checks(self, serving: bool) -> list[tuple[frozenset[str], Callable[[], None]]]:
        provider_fields = frozenset(
            {"provider_choice", "use_bedrock", "use_vertex", "use_foundry", "aws_region", "vertex_region"}
            | {"foundry_resource", "foundry_base_url"}
        )
        checks: list[tuple[frozenset[str], Callable[[], None]]] = [
            (frozenset({"api_keys", "metrics_api_keys", "api_keys_file"}), self._load_keys),
            (frozenset({"client_cert", "client_key"}), functools.partial(config_rules.client_pair, self)),
            (provider_fields, functools.partial(config_rules.provider_settings, self)),
            (frozenset({"stream_idle_warning_s", "stream_idle_timeout_s"}), functools.partial(config_rules.idle_order, self)),
            (frozenset({"drain_delay_s", "drain_timeout_s"}), functools.partial(config_rules.drain_order, self)),
        ]
        if serving:
            checks.append(
                (
                    frozenset({"api_keys", "metrics_api_keys", "api_keys_file", "allow_unauthenticated"}),
                    self._check_open,
                )
            )
        return checks

    @property
    def static_keys(self) -> tuple[InboundKey, ...]:
        """The keys from the environment (never reloaded): GATEWAY_API_KEYS, GATEWAY_METRICS_API_KEYS."""
        return (
            *parse_key_list(self.api_keys.get_secret_value()),
            *parse_key_list(self.metrics_api_keys.get_secret_value(), Role.METRICS),
        )

    def _load_keys(self) -> None:
        keys = list(self.static_keys)
        if self.api_keys_file is not None:
            try:
                keys.extend(parse_key_file(self.api_keys_file))
            except (OSError, UnicodeDecodeError, ValueError) as exc:
                raise ValueError(f"GATEWAY_API_KEYS_FILE: {exc}") from None
        self._inbound_keys = tuple(keys)

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

    @classmethod
    def from_environ(cls, environ: Mapping[str, str], *, serving: bool = False) -> Settings:
        """Validate the given environment; raise ``ConfigError`` with every problem, one line each.

        Bad values come first (pydantic collects them), then the cross-field checks of the fields
        that did validate (a second pass without the bad variables runs them), then unknown
        ``GATEWAY_*`` variables. ``serving`` adds the checks of :meth:`require_startable`.
        """
        index = config_checks.alias_index(cls)
        unknown = config_checks.unknown_variables(environ, index)
        problems: list[str] = []
        settings: Settings | None = None
        try:
            settings = cls.model_validate(dict(environ), context={SERVING: serving})
        except ValidationError as exc:
            problems.extend(config_checks.describe_errors(exc, cls))
            failed = config_checks.failed_fields(exc, cls)
            problems.extend(cls._problems_besides(environ, failed, serving))
        except ConfigError as exc:
            problems.extend(exc.problems)
        if settings is not None and not unknown:
            settings._aws_variables = frozenset(config_checks.AWS_CHAIN_VARIABLES & environ.keys())
            settings._dropped_url_credentials = config_checks.url_credentials(
                environ, (alias for alias, name in index.items() if name in UPSTREAM_URL_FIELDS)
            )
            return settings
        secrets = config_checks.secret_values(cls, environ)
        raise ConfigError(*(config_checks.scrub(line, secrets) for line in [*problems, *unknown])) from None

    @classmethod
    def _problems_besides(cls, environ: Mapping[str, str], failed: set[str], serving: bool) -> list[str]:
        """The cross-field problems among the fields that validated (``failed`` left at defaults)."""
        dropped = {
            alias
            for name in failed
            if name in cls.model_fields
            for alias in config_checks.aliases_of(cls, name)
        }
        rest = {name: value for name, value in environ.items() if name not in dropped}
        try:
            cls.model_validate(rest, context={FAILED_FIELDS: frozenset(failed), SERVING: serving})
        except ConfigError as exc:
            return list(exc.problems)
        except ValidationError:  # a validator that reads another field: already reported once
            return []
        return []

    def require_startable(self) -> None:
        """Checks that only matter for serving (not for tools that read the settings);
        ``from_environ(..., serving=True)`` runs them with the others."""
        try:
            self._check_open()
        except ValueError as exc:
            raise ConfigError(str(exc)) from None

    def _check_open(self) -> None:
        if not self.inbound_keys and not self.allow_unauthenticated:
            raise ValueError(
                "GATEWAY_API_KEYS / GATEWAY_API_KEYS_FILE: no inbound API key configured; refusing to "
                "start an open gateway (set GATEWAY_ALLOW_UNAUTHENTICATED=1 to allow it deliberately)"
            )

    @property
    def inbound_keys(self) -> tuple[InboundKey, ...]:
        return self._inbound_keys

    @property
    def upstream_credential(self) -> SecretStr | None:
        return self.anthropic_api_key or self.anthropic_auth_token

    @property
    def aws_chain_variables(self) -> frozenset[str]:
        """Which of botocore's chain variables were set (names only; for the start-up summary)."""
        return self._aws_variables

    @property
    def dropped_url_credentials(self) -> frozenset[str]:
        """The URL variables whose ``user:password@`` was ignored (for the start-up summary)."""
        return self._dropped_url_credentials
