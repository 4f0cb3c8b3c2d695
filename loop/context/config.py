"""What the context layers do and when: one frozen value, part of ``LoopConfig`` (``context``).

Thresholds follow the design digest: ``effective = context_window - min(max_output, 20_000)``,
auto-compact at ``effective - 13_000``, blocking limit at ``effective - 3_000`` (the blocking
buffer is ``LoopConfig.blocking_buffer_tokens``). For small windows the buffers would leave
nothing, so the thresholds never go below half (auto-compact) and 90% (blocking) of the
effective window.

Layer defaults aim at long sessions that keep their prompt cache: the cheap layers act rarely and
in batches (each rewrite of old messages costs one cache write of everything after it).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ContextConfig:
    enabled: bool = True
    """``False``: no layer runs and no recovery is attempted (the blocking limit still applies)."""

    autocompact_buffer_tokens: int = 13_000
    """Auto-compact fires this far below the effective window."""

    # --- layer 0: tool-result budget ---------------------------------------------------------
    tool_results_per_message_chars: int | None = 200_000
    """All results of finite-cap tools in one message together; the largest are excerpted first."""
    excerpt_head_chars: int = 2_000
    excerpt_tail_chars: int = 1_000

    # --- protected tail (kept verbatim by snip, collapse and auto-compact) ----------------------
    protected_tail_turns: int = 2
    """Assistant turns (with their results) at the end of the history."""
    protected_tail_max_tokens: int = 20_000
    """The tail stops growing past this size (the last assistant turn is always kept)."""

    # --- layer 1: snip -----------------------------------------------------------------------
    snip_max_turns: int | None = 150
    """Assistant turns the history may hold; older ones are dropped (``None``: never)."""
    snip_batch_turns: int = 25
    """How far below ``snip_max_turns`` one snip goes, so snips (cache breaks) are rare."""

    # --- layer 2: microcompact ---------------------------------------------------------------
    microcompact_keep_results: int = 8
    """The newest tool results are never cleared."""
    microcompact_min_age_turns: int = 4
    """Results of the last few assistant turns are never cleared."""
    microcompact_trigger_ratio: float = 0.5
    """Runs once the context reaches this share of the auto-compact threshold."""
    microcompact_min_free_tokens: int = 8_000
    """...and only when it can free at least this much (one cache break for a real gain)."""
    server_context_edits: bool | None = None
    """Use the ``context-management-2025-06-27`` beta (server-side clearing) instead of the client
    variant. ``None``: when the model caller's upstream accepts it (first party, Foundry, Bedrock)
    and the model is not a ``claude-3`` one."""

    # --- layer 3: context collapse -------------------------------------------------------------
    collapse: bool = True
    collapse_target_ratio: float = 0.85
    """Collapse stops once the context is below this share of the auto-compact threshold."""
    collapse_preview_chars: int = 160

    # --- layer 4: auto-compact -----------------------------------------------------------------
    autocompact: bool = True
    compact_max_tokens: int = 4_096
    """Output cap of the summarisation call."""
    keep_first_message_tokens: int = 4_000
    """The first user message (the task) is kept verbatim next to the summary up to this size."""
    breaker_threshold: int = 3
    """Consecutive summarisation failures after which auto-compact is no longer attempted."""
    breaker_cooldown_s: float = 600.0
    """Then one attempt is allowed again after this long (on the loop's clock)."""

    # --- limits learned from the upstream ------------------------------------------------------
    unknown_limit_factor: float = 0.6
    """A prompt-too-long without a stated maximum: assume the limit is this share of the refused
    request's estimated size."""
    min_learned_limit: int = 8_000
    """A learned limit is never taken below this (no real model accepts less)."""

    def __post_init__(self) -> None:
        for name in ("autocompact_buffer_tokens", "compact_max_tokens", "breaker_threshold"):
            if getattr(self, name) < 1:
                raise ValueError(f"ContextConfig.{name} must be >= 1")
        for name in ("microcompact_trigger_ratio", "collapse_target_ratio", "unknown_limit_factor"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise ValueError(f"ContextConfig.{name} must be in (0, 1], got {value}")
        if self.snip_max_turns is not None and self.snip_max_turns <= self.protected_tail_turns:
            raise ValueError("ContextConfig.snip_max_turns must exceed protected_tail_turns")
        if self.protected_tail_turns < 1:
            raise ValueError("ContextConfig.protected_tail_turns must be >= 1")
        if self.breaker_cooldown_s < 0:
            raise ValueError("ContextConfig.breaker_cooldown_s must be >= 0")


def autocompact_threshold(effective: int, buffer: int) -> int:
    """``effective - buffer``, never below half of ``effective``."""
    return max(effective - buffer, effective // 2)


def blocking_limit(effective: int, buffer: int) -> int:
    """``effective - buffer``, never below 90% of ``effective``."""
    return max(effective - buffer, effective * 9 // 10)
