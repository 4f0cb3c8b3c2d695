"""The ``cache_control`` each part of the system prompt gets, and the betas those markers need.

Tiers (broadest first): the static part gets ``scope: "global"`` when the context allows it
(:attr:`AssemblyContext.global_scope`), the dynamic part session-level caching; both get
``ttl: "1h"`` when the session's 1h latch is on, else the server's default 5 minutes. Keys are
always in the order ``type, ttl, scope`` (as Claude Code sends them), so equal inputs give equal
bytes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

from loop.prompt.assembly_context import AssemblyContext

EXTENDED_CACHE_TTL_BETA: Final = "extended-cache-ttl-2025-04-11"
"""The ``anthropic-beta`` value that goes with ``ttl: "1h"``."""

PROMPT_CACHING_SCOPE_BETA: Final = "prompt-caching-scope-2026-01-05"
"""The ``anthropic-beta`` value that goes with ``scope: "global"``."""

GLOBAL_SCOPE: Final = "global"
ONE_HOUR: Final = "1h"


def _ephemeral(context: AssemblyContext, *, scope: str | None) -> dict[str, str]:
    control = {"type": "ephemeral"}
    if context.ttl_1h:
        control["ttl"] = ONE_HOUR
    if scope is not None:
        control["scope"] = scope
    return control


def static_cache_control(context: AssemblyContext) -> dict[str, str]:
    """The broadest scope the upstream supports for the part before the boundary."""
    return _ephemeral(context, scope=GLOBAL_SCOPE if context.global_scope else None)


def dynamic_cache_control(context: AssemblyContext) -> dict[str, str]:
    """Session-level caching for the part after the boundary."""
    return _ephemeral(context, scope=None)


def betas_for(controls: Iterable[Mapping[str, str]]) -> tuple[str, ...]:
    """The betas the body halves in ``controls`` need, in a fixed order (for the request builder)."""
    controls = list(controls)
    betas: list[str] = []
    if any(c.get("ttl") == ONE_HOUR for c in controls):
        betas.append(EXTENDED_CACHE_TTL_BETA)
    if any(c.get("scope") == GLOBAL_SCOPE for c in controls):
        betas.append(PROMPT_CACHING_SCOPE_BETA)
    return tuple(betas)
