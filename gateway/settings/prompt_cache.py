"""Prompt-caching settings: the session store shared by replicas, its bounds, latched betas."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, field_validator

from gateway import config_checks
from gateway.cache.budget import DEFAULT_SESSION_MAX
from gateway.settings.section import CommaSet, Flag, Section


class CacheSettings(Section):
    """The cache pipeline's session store ("memory" or a redis:// URL; see gateway.cache)."""

    title: ClassVar[str] = "Prompt caching"

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
    latched_betas: CommaSet = Field(frozenset(), alias="GATEWAY_LATCHED_BETAS")
    """Comma-separated betas latched per session in addition to the defaults."""
    auto_cache: Flag = Field(False, alias="GATEWAY_AUTO_CACHE")
    """`1`: place cache breakpoints on requests that carry none."""
    normalise_billing_header: CommaSet = Field(
        frozenset({"bedrock", "vertex"}), alias="GATEWAY_NORMALISE_BILLING_HEADER"
    )
    """Comma-separated upstreams where Claude Code's per-request billing value is pinned."""

    @field_validator("session_store")
    @classmethod
    def _check_store(cls, value: str) -> str:
        if value != "memory":
            config_checks.check_redis_url(value)
        return value
