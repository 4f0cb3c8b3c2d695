"""``GATEWAY_UPSTREAMS_FILE``: several named upstreams and the routes over them (YAML or JSON).

Each upstream is the base environment overlaid with its own values and validated by the same
:class:`~gateway.config.Settings`; every problem is one line naming the field. Secrets stay in
the environment (``${NAME}``). The file format is in the design document.

Details: docs/internals/gateway-upstreams.md
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gateway.config import ConfigError, Settings
from gateway.config_checks import alias_index, scrub
from gateway.document_files import DuplicateKey, load_json, load_yaml
from gateway.provider_names import ProviderName

FILE_VARIABLE: Final = "GATEWAY_UPSTREAMS_FILE"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,47}$")
_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_REFERENCE = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")

# the variable each convenience field sets, per provider
REGION_VARIABLE: Final = {ProviderName.BEDROCK: "AWS_REGION", ProviderName.VERTEX: "CLOUD_ML_REGION"}
BASE_URL_VARIABLE: Final = {
    ProviderName.ANTHROPIC: "ANTHROPIC_BASE_URL",
    ProviderName.BEDROCK: "ANTHROPIC_BEDROCK_BASE_URL",
    ProviderName.VERTEX: "ANTHROPIC_VERTEX_BASE_URL",
    ProviderName.FOUNDRY: "ANTHROPIC_FOUNDRY_BASE_URL",
}
# variables a per-upstream overlay may not set: they belong to the gateway as a whole
GLOBAL_ONLY: Final = frozenset(
    {FILE_VARIABLE, "GATEWAY_API_KEYS", "GATEWAY_API_KEYS_FILE", "GATEWAY_SESSION_STORE"}
)


def _as_text(value: Any) -> Any:
    """A YAML/JSON scalar as environment text: ``true``/``false`` for booleans, numbers as written
    (``3``, ``0.5``); anything else as it is (a string stays, a list fails validation)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return value


MAX_SECONDS: Final = 366 * 86400.0  # any duration in the file: at most a year (Redis TTLs, timers)
MAX_PROBLEMS: Final = 50  # lines of problems shown (a file of thousands of bad items: "... and N more")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class UpstreamEntry(_Strict):
    name: str
    provider: ProviderName
    region: str | None = None
    base_url: str | None = None
    project: str | None = None
    credentials: dict[str, str] = Field(default_factory=dict)
    model_map: dict[str, str] = Field(default_factory=dict)
    beta_policy: dict[ProviderName, list[str]] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)

    @field_validator("env", mode="before")
    @classmethod
    def _env_scalars(cls, value: Any) -> Any:
        """``GATEWAY_MAX_RETRIES: 3`` and ``GATEWAY_NONSTREAMING_FALLBACK: true`` as YAML writes
        them (not quoted): a number or a boolean is the text an environment variable would hold."""
        if not isinstance(value, dict):
            return value
        return {k: _as_text(v) for k, v in value.items()}

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        if not _NAME.fullmatch(value):  # (``match`` let "name\n" through: ``$`` matches before it)
            raise ValueError("1-48 characters of [A-Za-z0-9_.-], starting with a letter or digit")
        return value

    @model_validator(mode="after")
    def _check_fields(self) -> UpstreamEntry:
        if self.region is not None and self.provider not in REGION_VARIABLE:
            raise ValueError(f"region: {self.provider.value} takes no region (set base_url)")
        if self.project is not None and self.provider is not ProviderName.VERTEX:
            raise ValueError("project: only vertex upstreams take a project")
        return self


class RouteEntry(_Strict):
    models: list[str] = Field(min_length=1)
    upstreams: list[str] = Field(min_length=1)
    weights: list[float] | None = None

    @model_validator(mode="after")
    def _check_weights(self) -> RouteEntry:
        if len(set(self.upstreams)) != len(self.upstreams):
            raise ValueError("upstreams: an upstream is listed twice")
        if self.weights is not None:
            if len(self.weights) != len(self.upstreams):
                raise ValueError("weights: one weight per upstream")
            if any(w < 0 for w in self.weights) or not any(w > 0 for w in self.weights):
                raise ValueError("weights: not negative, and at least one above 0")
            if not math.isfinite(sum(self.weights)):
                raise ValueError("weights: their sum must be a finite number")
        return self


class AffinityOptions(_Strict):
    return_after_s: float | None = Field(300.0, ge=0, le=MAX_SECONDS)  # None: a moved session never returns
    max_sessions: int = Field(100_000, gt=0, le=100_000_000)
    idle_s: float = Field(7200.0, gt=0, le=MAX_SECONDS)


class BreakerOptions(_Strict):
    failures: int = Field(5, ge=1)
    window_s: float = Field(30.0, gt=0, le=MAX_SECONDS)
    open_s: float = Field(30.0, gt=0, le=MAX_SECONDS)
    half_open_probes: int = Field(1, ge=1)  # for the whole fleet when shared through Redis
    probe_slot_s: float = Field(
        60.0, gt=0, le=MAX_SECONDS
    )  # with Redis: a probe slot never given back frees after this
    sync_s: float = Field(
        1.0, ge=0, le=MAX_SECONDS
    )  # with Redis: read the other replicas' breakers at most this often


class FailoverOptions(_Strict):
    same_upstream_retries: int = Field(1, ge=0)
    same_upstream_max_wait_s: float = Field(5.0, ge=0, le=MAX_SECONDS)  # a longer retry-after moves on


class ProbeOptions(_Strict):
    interval_s: float = Field(0.0, ge=0, le=MAX_SECONDS)  # 0: no active probe
    timeout_s: float = Field(5.0, gt=0, le=MAX_SECONDS)
    model: str | None = None  # the model probed (default: the first route's first literal pattern)


class UpstreamsFile(_Strict):
    upstreams: list[UpstreamEntry] = Field(min_length=1)
    routes: list[RouteEntry] = Field(default_factory=list)
    affinity: AffinityOptions = Field(default_factory=AffinityOptions)
    breaker: BreakerOptions = Field(default_factory=BreakerOptions)
    failover: FailoverOptions = Field(default_factory=FailoverOptions)
    probe: ProbeOptions = Field(default_factory=ProbeOptions)


@dataclass(frozen=True, slots=True)
class UpstreamSpec:
    """One named upstream: its provider kind and the settings its provider is built from."""

    name: str
    provider: ProviderName
    settings: Settings


@dataclass(frozen=True, slots=True)
class Route:
    patterns: tuple[str, ...]
    upstreams: tuple[str, ...]
    weights: tuple[float, ...] | None
    key: str = "*"  # names the route in session placements: its index in the file ("*": no route)


@dataclass(frozen=True, slots=True)
class UpstreamsConfig:
    """The validated file: upstreams in file order, routes in match order, and the options."""

    upstreams: tuple[UpstreamSpec, ...]
    routes: tuple[Route, ...]
    affinity: AffinityOptions
    breaker: BreakerOptions
    failover: FailoverOptions
    probe: ProbeOptions

    def names(self) -> tuple[str, ...]:
        return tuple(spec.name for spec in self.upstreams)


def _location(loc: tuple[int | str, ...]) -> str:
    """``upstreams[0].env.GATEWAY_MAX_RETRIES``; a key under ``credentials``/``env`` that is not a
    variable name is not shown (``ANTHROPIC_API_KEY:sk-...``, a typo, would print the secret)."""
    text = ""
    for i, part in enumerate(loc):
        if isinstance(part, int):
            text += f"[{part}]"
            continue
        if i and loc[i - 1] in ("credentials", "env") and not _VARIABLE.fullmatch(part):
            part = "<a key that is not a variable name>"
        text += f".{part}" if text else part
    return text


def _problems(lines: list[str]) -> ConfigError:
    """One line per problem, the first ``MAX_PROBLEMS`` of them."""
    shown = [f"{FILE_VARIABLE}: {line}" for line in lines[:MAX_PROBLEMS]]
    if len(lines) > MAX_PROBLEMS:
        shown.append(f"{FILE_VARIABLE}: ... and {len(lines) - MAX_PROBLEMS} more problems")
    return ConfigError(*shown)


def _read(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{FILE_VARIABLE}: cannot read {path}: {type(exc).__name__}") from None
    if path.suffix.lower() in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError:
            raise ConfigError(
                f"{FILE_VARIABLE}: a YAML file needs PyYAML (pip install pyyaml), or use JSON"
            ) from None
        try:
            return load_yaml(text)
        except RecursionError:
            raise ConfigError(f"{FILE_VARIABLE}: nested too deeply") from None
        except DuplicateKey as exc:
            raise ConfigError(f"{FILE_VARIABLE}: {exc}") from None
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" at line {mark.line + 1}" if mark is not None else ""
            raise ConfigError(f"{FILE_VARIABLE}: not valid YAML{where}") from None
    try:
        return load_json(text)
    except RecursionError:
        raise ConfigError(f"{FILE_VARIABLE}: nested too deeply") from None
    except DuplicateKey as exc:
        raise ConfigError(f"{FILE_VARIABLE}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{FILE_VARIABLE}: not valid JSON at line {exc.lineno}: {exc.msg}") from None


def _overlay(
    index: int, entry: UpstreamEntry, environ: Mapping[str, str], known: Mapping[str, str]
) -> tuple[dict[str, str], list[str]]:
    """The variables this upstream sets over the base environment, and the problems found."""
    where = f"upstreams[{index}]"
    problems: list[str] = []
    overlay: dict[str, str] = {"GATEWAY_PROVIDER": entry.provider.value}
    if entry.region is not None:
        overlay[REGION_VARIABLE[entry.provider]] = entry.region
    if entry.base_url is not None:
        overlay[BASE_URL_VARIABLE[entry.provider]] = entry.base_url
    if entry.project is not None:
        overlay["ANTHROPIC_VERTEX_PROJECT_ID"] = entry.project
    if entry.model_map:
        overlay["GATEWAY_MODEL_MAP"] = json.dumps(entry.model_map)
    if entry.beta_policy:
        overlay["GATEWAY_BETA_POLICY"] = json.dumps(entry.beta_policy)
    for section, values in (("credentials", entry.credentials), ("env", entry.env)):
        for variable, raw in values.items():
            if variable not in known:
                problems.append(f"{where}.{section}.{variable}: not a setting of switchyard serve")
                continue
            if variable in GLOBAL_ONLY:
                problems.append(f"{where}.{section}.{variable}: a gateway-wide setting, not per upstream")
                continue
            reference = _REFERENCE.fullmatch(raw)
            if reference is not None:
                if reference.group(1) not in environ:
                    problems.append(f"{where}.{section}.{variable}: {reference.group(1)} is not set")
                    continue
                raw = environ[reference.group(1)]
                if section == "credentials" and not raw.strip():
                    problems.append(f"{where}.{section}.{variable}: {reference.group(1)} is empty")
                    continue
            overlay[variable] = raw
    return overlay, problems


def _settings_for(
    index: int, entry: UpstreamEntry, environ: Mapping[str, str], overlay: Mapping[str, str]
) -> tuple[Settings | None, list[str]]:
    base = {k: v for k, v in environ.items() if k != FILE_VARIABLE}
    try:
        return Settings.from_environ({**base, **overlay}), []
    except ConfigError as exc:  # each line names the variable: say which upstream it belongs to
        return None, [f"upstreams[{index}] ({entry.name}): {line}" for line in exc.problems]


def upstreams_of(settings: Settings) -> UpstreamsConfig | None:
    """The settings' upstreams file, loaded and validated once (``None`` without one)."""
    if settings.selection.upstreams_file is None:
        return None
    loaded = settings.upstreams
    if loaded is None:
        loaded = load_upstreams(settings.selection.upstreams_file, settings.source_environ)
        settings.adopt_upstreams(loaded)
    return loaded if isinstance(loaded, UpstreamsConfig) else None


def load_upstreams(path: Path, environ: Mapping[str, str]) -> UpstreamsConfig:
    """Read and validate the file; ``ConfigError`` with one line per problem, each naming the field."""
    raw = _read(path)
    try:
        parsed = UpstreamsFile.model_validate(raw)
    except RecursionError:
        raise ConfigError(f"{FILE_VARIABLE}: nested too deeply") from None
    except ValidationError as exc:
        lines = []
        for error in exc.errors():
            message = str(error["msg"]).removeprefix("Value error, ")
            lines.append(f"{_location(tuple(error['loc'])) or 'file'}: {message}")
        raise _problems(lines) from None
    problems: list[str] = []
    names: dict[str, int] = {}
    for i, entry in enumerate(parsed.upstreams):
        if entry.name in names:
            problems.append(f"upstreams[{i}].name: {entry.name!r} is already upstreams[{names[entry.name]}]")
        names.setdefault(entry.name, i)
    for r, route in enumerate(parsed.routes):
        for u, name in enumerate(route.upstreams):
            if name not in names:
                problems.append(f"routes[{r}].upstreams[{u}]: no upstream named {name!r}")
    known = alias_index(Settings)
    specs: list[UpstreamSpec] = []
    for i, entry in enumerate(parsed.upstreams):
        overlay, found = _overlay(i, entry, environ, known)
        problems.extend(found)
        if found:
            continue
        settings, found = _settings_for(i, entry, environ, overlay)
        problems.extend(found)
        if settings is not None:
            specs.append(UpstreamSpec(entry.name, entry.provider, settings))
    if problems:
        secrets = [v for e in parsed.upstreams for v in e.credentials.values() if len(v) >= 3]
        raise _problems([scrub(line, secrets) for line in problems])
    routes = tuple(
        Route(tuple(r.models), tuple(r.upstreams), None if r.weights is None else tuple(r.weights), str(i))
        for i, r in enumerate(parsed.routes)
    )
    return UpstreamsConfig(
        tuple(specs), routes, parsed.affinity, parsed.breaker, parsed.failover, parsed.probe
    )
