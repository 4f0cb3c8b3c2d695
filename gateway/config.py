"""The gateway's configuration: read from the environment once, at start-up, into a frozen model.

Nothing else reads ``os.environ``; every problem is one line naming the variable, never a secret.
``Settings`` composes sections (:mod:`gateway.settings`), one per subsystem; each field's docstring
is its ``serve --help`` line. How to add a section, field or cross-field check: the design document.

Details: docs/internals/gateway.md
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    model_validator,
)

from gateway import config_checks, config_rules
from gateway.fleet import signin_rules
from gateway.keys import InboundKey, parse_key_file
from gateway.provider_names import ProviderName as ProviderName  # re-exported (the leaf is its home)
from gateway.settings.aws_bedrock import BedrockSettings
from gateway.settings.azure_foundry import FoundrySettings
from gateway.settings.client_auth import AuthSettings
from gateway.settings.first_party import AnthropicSettings
from gateway.settings.fleet_policy import PolicySettings
from gateway.settings.fleet_signin import SigninSettings
from gateway.settings.fleet_telemetry import TelemetrySettings
from gateway.settings.listener import ListenerSettings
from gateway.settings.model_policy import ModelSettings
from gateway.settings.observability import ObservabilitySettings
from gateway.settings.prompt_cache import CacheSettings
from gateway.settings.provider_selection import ProviderSelection
from gateway.settings.resilience import ResilienceSettings
from gateway.settings.section import Section
from gateway.settings.upstream_egress import EgressSettings
from gateway.settings.vertex_ai import VertexSettings


class ConfigError(Exception):
    """Configuration values are missing or invalid: one line per problem, each naming the variable."""

    def __init__(self, *problems: str) -> None:
        super().__init__("\n".join(problems))
        self.problems: tuple[str, ...] = problems


UPSTREAM_URL_FIELDS = frozenset(
    {"anthropic.base_url", "bedrock.base_url", "bedrock.control_url", "vertex.base_url", "foundry.base_url"}
)  # credentials (userinfo) in these are dropped: the upstream credential has its own variables
FAILED_FIELDS = "failed_fields"  # validation context: fields that failed (their checks are skipped)
SERVING = "serving"  # validation context: also run the checks only ``switchyard serve`` needs
SectionT = TypeVar("SectionT", bound=Section)


def _section(model: type[SectionT]) -> Any:
    """A section field's default: a new ``model()``, made by a plain function (pydantic inspects a
    default factory's signature when it builds ``Settings``, and a model class's is costly to make)."""
    return Field(default_factory=lambda: model())


class Settings(BaseModel):
    """Immutable snapshot of every setting the gateway uses, in sections (``--help`` order)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    listener: ListenerSettings = _section(ListenerSettings)
    auth: AuthSettings = _section(AuthSettings)
    anthropic: AnthropicSettings = _section(AnthropicSettings)
    selection: ProviderSelection = _section(ProviderSelection)
    bedrock: BedrockSettings = _section(BedrockSettings)
    vertex: VertexSettings = _section(VertexSettings)
    foundry: FoundrySettings = _section(FoundrySettings)
    models: ModelSettings = _section(ModelSettings)
    egress: EgressSettings = _section(EgressSettings)
    resilience: ResilienceSettings = _section(ResilienceSettings)
    observability: ObservabilitySettings = _section(ObservabilitySettings)
    cache: CacheSettings = _section(CacheSettings)
    signin: SigninSettings = _section(SigninSettings)
    telemetry: TelemetrySettings = _section(TelemetrySettings)
    policy: PolicySettings = _section(PolicySettings)

    _inbound_keys: tuple[InboundKey, ...] = PrivateAttr(())
    _aws_variables: frozenset[str] = PrivateAttr(frozenset())  # names set (for the summary)
    _dropped_url_credentials: frozenset[str] = PrivateAttr(frozenset())  # variables (for the summary)
    _upstreams: Any = PrivateAttr(None)  # gateway.upstreams.config.UpstreamsConfig, once loaded
    _environ: Mapping[str, str] = PrivateAttr(default_factory=dict)  # only with GATEWAY_UPSTREAMS_FILE

    @model_validator(mode="before")
    @classmethod
    def _sections_read_the_environment(cls, data: object) -> object:
        """Every section validates the same flat environment (each picks its own variables)."""
        if not isinstance(data, Mapping):
            return data
        sections = config_checks.section_models(cls)
        return {
            **data,
            **{name: data for name in sections if not isinstance(data.get(name), Section)},
        }

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
            {
                "selection.provider_choice",
                "selection.use_bedrock",
                "selection.use_vertex",
                "selection.use_foundry",
            }
            | {"bedrock.region", "vertex.region", "foundry.resource", "foundry.base_url"}
        )
        key_fields = frozenset({"auth.api_keys", "auth.metrics_api_keys", "auth.api_keys_file"})
        checks: list[tuple[frozenset[str], Callable[[], None]]] = [
            (key_fields, self._load_keys),
            (
                frozenset({"egress.client_cert", "egress.client_key"}),
                functools.partial(config_rules.client_pair, self.egress),
            ),
            (provider_fields, functools.partial(config_rules.provider_settings, self)),
            (
                frozenset({"resilience.stream_idle_warning_s", "resilience.stream_idle_timeout_s"}),
                functools.partial(config_rules.idle_order, self.resilience),
            ),
            (
                frozenset({"listener.drain_delay_s", "listener.drain_timeout_s"}),
                functools.partial(config_rules.drain_order, self.listener),
            ),
            (signin_rules.FIELDS, functools.partial(signin_rules.check, self.signin)),
            (frozenset({"bedrock.bearer_token", "bedrock.bearer_token_file"}), self.bedrock.load_token_file),
            (frozenset({"foundry.api_key", "foundry.api_key_file"}), self.foundry.load_key_file),
        ]
        if serving:
            checks.append(
                (key_fields | {"auth.allow_unauthenticated", "signin.oidc_issuer"}, self._check_open)
            )
        return checks

    def _load_keys(self) -> None:
        keys = list(self.auth.static_keys)
        if self.auth.api_keys_file is not None:
            try:
                keys.extend(parse_key_file(self.auth.api_keys_file))
            except (OSError, UnicodeDecodeError, ValueError) as exc:
                raise ValueError(f"GATEWAY_API_KEYS_FILE: {exc}") from None
        self._inbound_keys = tuple(keys)

    @property
    def provider(self) -> ProviderName:
        """The upstream this deployment targets, chosen once from the snapshot."""
        return self.selection.provider

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
        if settings is not None and settings.selection.upstreams_file is not None:  # upstreams (issue 18)
            settings._environ = dict(environ)  # each upstream overlays it (gateway.upstreams.config)
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
            if name in config_checks.leaf_fields(cls)
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
        if not self.inbound_keys and not self.auth.allow_unauthenticated and self.signin.oidc_issuer is None:
            raise ValueError(
                "GATEWAY_API_KEYS / GATEWAY_API_KEYS_FILE: no inbound API key configured; refusing to "
                "start an open gateway (set GATEWAY_ALLOW_UNAUTHENTICATED=1 to allow it deliberately)"
            )

    @property
    def upstreams(self) -> Any:
        """The loaded ``GATEWAY_UPSTREAMS_FILE`` (``gateway.upstreams.config.upstreams_of`` loads it)."""
        return self._upstreams

    @property
    def source_environ(self) -> Mapping[str, str]:
        """The environment these settings came from, kept only with GATEWAY_UPSTREAMS_FILE (issue 18:
        each upstream's settings are it overlaid with the upstream's values)."""
        return self._environ

    def adopt_upstreams(self, upstreams: Any) -> None:
        self._upstreams = upstreams

    @property
    def inbound_keys(self) -> tuple[InboundKey, ...]:
        """Every inbound key at start-up: the environment's and GATEWAY_API_KEYS_FILE's."""
        return self._inbound_keys

    @property
    def aws_chain_variables(self) -> frozenset[str]:
        """Which of botocore's chain variables were set (names only; for the start-up summary)."""
        return self._aws_variables

    @property
    def dropped_url_credentials(self) -> frozenset[str]:
        """The URL variables whose ``user:password@`` was ignored (for the start-up summary)."""
        return self._dropped_url_credentials
