"""The names the context layers report under (event fields, JSON output, metric labels)."""

from __future__ import annotations

import enum


class Layer(enum.StrEnum):
    """The layers, in the order they run before every model call (0 to 4), and reactive
    compaction (layer 4's summarisation, run on demand after the upstream refused the prompt)."""

    TOOL_RESULT_BUDGET = "tool_result_budget"
    SNIP = "snip"
    MICROCOMPACT = "microcompact"
    COLLAPSE = "collapse"
    AUTOCOMPACT = "autocompact"
    REACTIVE_COMPACT = "reactive_compact"


LAYER_ORDER: tuple[Layer, ...] = (
    Layer.TOOL_RESULT_BUDGET,
    Layer.SNIP,
    Layer.MICROCOMPACT,
    Layer.COLLAPSE,
    Layer.AUTOCOMPACT,
)


class Outcome(enum.StrEnum):
    APPLIED = "applied"
    """The layer rewrote the history."""
    SERVER_APPLIED = "server_applied"
    """The upstream cleared context itself (context-management beta), as its response reported."""
    FAILED = "failed"
    """The summarisation call failed (it counts towards the circuit breaker)."""
    TRUNCATED = "truncated"
    """No summary (the breaker is open or the call failed): the oldest part was dropped instead."""
    BREAKER_OPEN = "breaker_open"
    """Auto-compaction was due but the circuit breaker is open: nothing was attempted."""
