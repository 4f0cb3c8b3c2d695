"""Nested budgets: what a child may spend of its parent's tokens and wall clock.

A child's token allowance is reserved when it starts: ``budget_share`` of what the parent has left
(its limit minus what it and its finished children spent, minus what running siblings reserved),
so children started together cannot overspend together and the parent keeps the rest. The child
runs with that allowance as its own ``max_total_tokens`` guardrail (stopped before the call after
the allowance ran out). When it ends, its reservation is released and what it really spent is
charged to the parent: the parent folds it into its own usage (``take_spent``) and its guardrails
count it. The wall clock is shared: a child's deadline is its parent's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from loop.usage import TokenUsage


@dataclass(frozen=True, slots=True)
class Allowance:
    tokens: int | None
    """Billed tokens the child may spend (``None``: no token limit)."""
    seconds: float | None
    """Wall-clock seconds left before the parent's deadline (``None``: none)."""

    @property
    def exhausted(self) -> str | None:
        """Why the child cannot start at all, or ``None``."""
        if self.tokens is not None and self.tokens < 1:
            return "tokens"
        if self.seconds is not None and self.seconds <= 0:
            return "wall_clock"
        return None


class NestedBudget:
    def __init__(
        self,
        *,
        max_tokens: int | None,
        deadline: float | None,
        share: float,
        parent_spent: Callable[[], int],
    ) -> None:
        """``parent_spent``: the billed tokens the parent's usage holds now (children it already
        folded in included); ``deadline``: the parent's, on its clock."""
        self._max_tokens = max_tokens
        self._deadline = deadline
        self._share = share
        self._parent_spent = parent_spent
        self._reserved = 0
        self._unfolded = TokenUsage()

    def left(self) -> int | None:
        """Billed tokens nobody has spent or reserved."""
        if self._max_tokens is None:
            return None
        return self._max_tokens - self._parent_spent() - self._unfolded.billed - self._reserved

    def reserve(self, now: float) -> Allowance:
        left = self.left()
        tokens = None if left is None else max(0, int(left * self._share))
        seconds = None if self._deadline is None else self._deadline - now
        allowance = Allowance(tokens, seconds)
        if tokens is not None and allowance.exhausted is None:
            self._reserved += tokens
        return allowance

    def release(self, allowance: Allowance, spent: TokenUsage) -> None:
        if allowance.tokens is not None and allowance.exhausted is None:
            self._reserved -= allowance.tokens
        self._unfolded = self._unfolded + spent

    def take_spent(self) -> TokenUsage:
        """What finished children spent since the last call (the parent adds it to its usage)."""
        spent, self._unfolded = self._unfolded, TokenUsage()
        return spent
