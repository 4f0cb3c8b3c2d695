"""Sticky per-session latches: what a session's first requests decided stays decided.

A cache-key beta, once sent in a session, keeps being sent; ``ttl_1h`` and ``global_scope`` are
decided at the session's first request with a breakpoint and never flipped.
``GATEWAY_LATCHED_BETAS`` adds latchable betas.

Details: docs/internals/gateway-cache.md
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from gateway.cache.breakpoints import locate_breakpoints
from gateway.values import value

DEFAULT_LATCHED_BETAS: Final = frozenset(
    {
        "context-1m-2025-08-07",
        "context-management-2025-06-27",
        "prompt-caching-scope-2026-01-05",
        "extended-cache-ttl-2025-04-11",
        "interleaved-thinking-2025-05-14",
        "redact-thinking-2026-02-12",
        "mid-conversation-system-2026-04-07",
        "advanced-tool-use-2025-11-20",
        "tool-search-tool-2025-10-19",
        "fast-mode-2026-02-01",
        "effort-2025-11-24",
    }
)


@value
class Latches:
    betas: frozenset[str] = frozenset()
    ttl_1h: bool | None = None
    global_scope: bool | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"betas": sorted(self.betas), "ttl_1h": self.ttl_1h, "global_scope": self.global_scope}


def observe(
    payload: Mapping[str, Any],
    betas: Iterable[str],
    latchable: frozenset[str],
    *,
    messages: Iterable[int] | None = None,
) -> Latches:
    """What this request would latch if it were the session's first.

    Every breakpoint counts (nested ``tool_result`` content and the top-level automatic one
    included); a request without any leaves both eligibilities undecided (``None``).
    ``messages``: the only messages that can hold a marker (see ``locate_breakpoints``)."""
    latched = frozenset(b for b in betas if b in latchable)
    breakpoints = locate_breakpoints(payload, messages=messages)
    top = payload.get("cache_control")
    if not breakpoints and not isinstance(top, dict):
        return Latches(latched)
    uses_1h = any(b.ttl == "1h" for b in breakpoints) or (isinstance(top, dict) and top.get("ttl") == "1h")
    uses_global = any(b.global_scope for b in breakpoints)
    return Latches(latched, uses_1h, uses_global)


def merged_betas(client_betas: list[str], latched: frozenset[str]) -> list[str]:
    """The client's betas in its own order, then latched ones it no longer sends (sorted)."""
    present = set(client_betas)
    return [*client_betas, *sorted(latched - present)]
