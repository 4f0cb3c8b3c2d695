"""The policy file (``GATEWAY_POLICY_FILE``): its schema, and parsing it with one-line errors.

Every problem is one line ``<file>: <field.path>: <message>`` and never echoes a value. The schema
is in the design document.

Details: docs/internals/gateway-fleet.md
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from gateway.document_files import DuplicateKey, load_json, load_yaml
from gateway.fleet.model_rules import TIERS

Tier = Literal["opus", "sonnet", "haiku"]
assert set(TIERS) == {"opus", "sonnet", "haiku"}


class PolicyError(ValueError):
    """The policy file is unreadable or invalid: one line per problem, each naming the field."""

    def __init__(self, *problems: str) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


class _Strict(BaseModel):
    # validators built on the first parse (a policy file, an admin API change), not at import:
    # a gateway without GATEWAY_POLICY_FILE never builds them (start-up time)
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


MAX_CAP_USD = 1e9
"""The largest spend cap (file or admin API): its micro-USD stay exact in a double (Redis' Lua)."""


def _not_boolean(value: Any) -> Any:
    if isinstance(value, bool):  # YAML's yes/true: pydantic would take it as 1.0
        raise ValueError("Input should be a number, not a boolean")
    return value


# a finite number in [0, MAX_CAP_USD]; a numeric string is taken (PyYAML reads ``1e3`` as one)
CapUsd = Annotated[float, BeforeValidator(_not_boolean), Field(ge=0, le=MAX_CAP_USD, allow_inf_nan=False)]


class SpendCapsIn(_Strict):
    """USD per UTC calendar day, week (from Monday) and month; unset: no cap for that period."""

    daily_usd: CapUsd | None = None
    weekly_usd: CapUsd | None = None
    monthly_usd: CapUsd | None = None


class RateLimitsIn(_Strict):
    requests_per_minute: int | None = Field(None, gt=0)
    tokens_per_minute: int | None = Field(None, gt=0)
    concurrent_streams: int | None = Field(None, ge=0)


class ModelsIn(_Strict):
    allow: list[str] | None = None
    deny: list[str] = Field(default_factory=list)


class EntryIn(_Strict):
    models: ModelsIn | None = None
    spend_caps: SpendCapsIn | None = None
    rate_limits: RateLimitsIn | None = None
    managed_settings: dict[str, Any] | None = None


class GroupIn(EntryIn):
    group: str = Field(min_length=1)
    pool: SpendCapsIn | None = None
    pool_rate_limits: RateLimitsIn | None = None


class UserIn(EntryIn):
    user: str = Field(min_length=1)


class OrganizationIn(_Strict):
    spend_caps: SpendCapsIn | None = None


class PolicyIn(_Strict):
    version: Literal[1] = 1
    mode: Literal["layered", "first_match"] = "layered"
    admin_groups: list[str] = Field(default_factory=list)
    kill_switch: list[Tier] = Field(default_factory=list)
    organization: OrganizationIn = Field(default_factory=OrganizationIn)
    base: EntryIn = Field(default_factory=EntryIn)
    groups: list[GroupIn] = Field(default_factory=list)
    users: list[UserIn] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique_names(self) -> PolicyIn:
        for kind, names in (
            ("groups", [g.group for g in self.groups]),
            ("users", [u.user for u in self.users]),
        ):
            seen: set[str] = set()
            for index, name in enumerate(names):
                if name in seen:
                    raise ValueError(f"{kind}.{index}: a second entry for the same {kind[:-1]}")
                seen.add(name)
        return self


def default_policy() -> PolicyIn:
    """The policy without a file (every field at its default), made without building the validator
    (nor calling the default factories: pydantic would inspect their signatures first)."""
    base = EntryIn.model_construct(
        _fields_set=set(), models=None, spend_caps=None, rate_limits=None, managed_settings=None
    )
    return PolicyIn.model_construct(
        _fields_set=set(),
        version=1,
        mode="layered",
        admin_groups=[],
        kill_switch=[],
        organization=OrganizationIn.model_construct(_fields_set=set(), spend_caps=None),
        base=base,
        groups=[],
        users=[],
    )


def _location(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc)


def describe(exc: ValidationError, source: str) -> list[str]:
    """One line per validation error: ``<source>: <field path>: <message>`` (no input shown)."""
    lines = []
    for error in exc.errors(include_input=False, include_url=False):
        message = error["msg"].removeprefix("Value error, ")
        where = f"{_location(error['loc'])}: " if error["loc"] else ""
        lines.append(f"{source}: {where}{message}")
    return lines


MAX_SAFE_INTEGER = 2**53 - 1  # JavaScript's Number.MAX_SAFE_INTEGER: Claude Code reads these settings


def _json_problems(value: Any, where: str) -> list[str]:
    """Where ``value`` is not JSON the checksum can be taken over (string keys, finite numbers):
    ``<path>: <problem>``, naming the type found, never the value."""
    if isinstance(value, dict):
        found = []
        for key, item in value.items():
            if not isinstance(key, str):
                found.append(f"{where}: a key is not a string ({type(key).__name__})")
            else:
                found.extend(_json_problems(item, f"{where}.{key}"))
        return found
    if isinstance(value, list):
        return [line for index, item in enumerate(value) for line in _json_problems(item, f"{where}.{index}")]
    if isinstance(value, float) and not math.isfinite(value):
        return [f"{where}: not a finite number"]
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_SAFE_INTEGER:
        # (YAML reads 0x... of any length) past 2**53 a client's JSON (JavaScript) changes it, and
        # Python's refuses integers of over 4,300 digits
        return [f"{where}: an integer beyond 2**53; quote it to make it a string"]
    if value is None or isinstance(value, str | int | float):  # bool is an int
        return []
    return [f"{where}: not a JSON value ({type(value).__name__}); quote it to make it a string"]


def _settings_problems(spec: PolicyIn, source: str) -> list[str]:
    entries: list[tuple[str, EntryIn]] = [("base", spec.base)]
    entries += [(f"groups.{index}", entry) for index, entry in enumerate(spec.groups)]
    entries += [(f"users.{index}", entry) for index, entry in enumerate(spec.users)]
    return [
        f"{source}: {line}"
        for where, entry in entries
        if entry.managed_settings is not None
        for line in _json_problems(entry.managed_settings, f"{where}.managed_settings")
    ]


def parse_policy(text: str, source: str) -> PolicyIn:
    """Parse and validate the policy file's text; ``PolicyError`` names every problem."""
    try:  # (a key given twice is refused: the loaders would keep the last one without a word)
        raw: Any = load_json(text) if source.endswith(".json") else load_yaml(text)
    except DuplicateKey as exc:
        raise PolicyError(f"{source}: {exc}") from None
    except (ValueError, ImportError) as exc:  # json.JSONDecodeError is a ValueError
        raise PolicyError(f"{source}: not valid JSON/YAML: {str(exc).splitlines()[0]}") from None
    except Exception as exc:  # yaml.YAMLError: its first line says where
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise PolicyError(f"{source}: not valid YAML: {first}") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise PolicyError(f"{source}: (top level): expected a mapping")
    try:
        spec = PolicyIn.model_validate(raw)
    except ValidationError as exc:
        raise PolicyError(*describe(exc, source)) from None
    problems = _settings_problems(spec, source)  # YAML dates, sets, binary, .nan: not JSON
    if problems:
        raise PolicyError(*problems)
    return spec


def load_policy(path: Path) -> PolicyIn:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PolicyError(f"{path}: cannot read it ({type(exc).__name__})") from None
    return parse_policy(text, str(path))
