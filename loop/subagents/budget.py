"""Nested budgets: what a child may spend of its parent's tokens, cost and wall clock.

A child's token and cost allowances are reserved when it starts: ``budget_share`` of what the
parent has left (its limit minus what it and its finished children spent, minus what running
siblings reserved), so children started together cannot overspend together and the parent keeps
the rest. The child runs with those allowances as its own ``max_total_tokens`` and
``max_cost_usd`` guardrails (stopped before the call after an allowance ran out); a parent's
cache-read cap (``max_cache_read_tokens``) nests the same way. When it ends,
its reservation is released and what it really spent (tokens and USD, a killed child's partial
response included) is charged to the parent: the parent folds it into its own usage
(``take_spent``) and its guardrails count it. The wall clock is shared: a child's deadline is its
parent's.
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
    cost_usd: float | None = None
    """USD the child may spend (``None``: no cost limit)."""
    cache_reads: int | None = None
    """Cache-read tokens the child may spend (``None``: no cache-read limit)."""

    @property
    def exhausted(self) -> str | None:
        """Why the child cannot start at all, or ``None``."""
        if self.tokens is not None and self.tokens < 1:
            return "tokens"
        if self.cost_usd is not None and self.cost_usd <= 0:
            return "cost"
        if self.cache_reads is not None and self.cache_reads < 1:
            return "cache_read_tokens"
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
        parent_spent: Callable[[], TokenUsage],
        max_cost_usd: float | None = None,
        max_cache_reads: int | None = None,
    ) -> None:
        """``parent_spent``: the parent's usage now (children it already folded in included);
        ``deadline``: the parent's, on its clock."""
        self._max_tokens = max_tokens
        self._max_cost = max_cost_usd
        self._max_reads = max_cache_reads
        self._reserved_reads = 0
        self._deadline = deadline
        self._share = share
        self._parent_spent = parent_spent
        self._reserved = 0
        self._reserved_cost = 0.0
        self._unfolded = TokenUsage()

    def left(self) -> int | None:
        """Billed tokens nobody has spent or reserved."""
        if self._max_tokens is None:
            return None
        return self._max_tokens - self._parent_spent().billed - self._unfolded.billed - self._reserved

    def cost_left(self) -> float | None:
        """USD nobody has spent or reserved."""
        if self._max_cost is None:
            return None
        return self._max_cost - self._parent_spent().cost_usd - self._unfolded.cost_usd - self._reserved_cost

    def cache_reads_left(self) -> int | None:
        """Cache-read tokens nobody has spent or reserved."""
        if self._max_reads is None:
            return None
        spent = self._parent_spent().cache_read_input_tokens + self._unfolded.cache_read_input_tokens
        return self._max_reads - spent - self._reserved_reads

    def reserve(self, now: float) -> Allowance:
        left, cost_left, reads_left = self.left(), self.cost_left(), self.cache_reads_left()
        tokens = None if left is None else max(0, int(left * self._share))
        cost = None if cost_left is None else max(0.0, cost_left * self._share)
        reads = None if reads_left is None else max(0, int(reads_left * self._share))
        seconds = None if self._deadline is None else self._deadline - now
        allowance = Allowance(tokens, seconds, cost, reads)
        if allowance.exhausted is None:
            self._reserved += tokens or 0
            self._reserved_cost += cost or 0.0
            self._reserved_reads += reads or 0
        return allowance

    def release(self, allowance: Allowance, spent: TokenUsage) -> None:
        if allowance.exhausted is None:
            self._reserved -= allowance.tokens or 0
            self._reserved_cost -= allowance.cost_usd or 0.0
            self._reserved_reads -= allowance.cache_reads or 0
        self._unfolded = self._unfolded + spent

    def take_spent(self) -> TokenUsage:
        """What finished children spent since the last call (the parent adds it to its usage)."""
        spent, self._unfolded = self._unfolded, TokenUsage()
        return spent
