"""Fleet policy settings: the policy file (models, spend caps, rate limits, managed settings per
user and group; ``gateway.fleet``) and how its counters behave. Counters live in this process, or
in Redis when ``GATEWAY_SESSION_STORE`` is a ``redis://`` URL."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field, field_validator

from gateway.settings.section import ReadableFile, Section


class PolicySettings(Section):
    """Who may use which models, and how much."""

    title: ClassVar[str] = "Fleet policy"

    policy_file: ReadableFile = Field(None, alias="GATEWAY_POLICY_FILE")
    """YAML or JSON policy file: models, spend caps, rate limits, managed settings per user and group (unset: everything allowed, no caps)."""
    policy_reload_s: float = Field(5.0, alias="GATEWAY_POLICY_RELOAD_S", ge=0, le=300)
    """Re-read GATEWAY_POLICY_FILE when it changes, polling this often, seconds (0: only on SIGHUP); also how often replicas take admin-set caps from Redis."""
    policy_counters_fail: Literal["open", "closed"] = Field("open", alias="GATEWAY_POLICY_COUNTERS_FAIL")
    """When the spend/rate counters (Redis) cannot answer: `open` lets requests through unmetered, `closed` refuses them (`429`, `fetch_error`)."""

    @field_validator("policy_file")
    @classmethod
    def _check_policy(cls, value: Path | None) -> Path | None:
        if value is not None:
            from gateway.fleet.policy_file import load_policy

            load_policy(value)  # a PolicyError is a ValueError: one line per problem, naming the field
        return value
