"""The run's token budget (seed-digest B, "+500k"): pure rules and bookkeeping.

Pure functions only: when a completed turn continues (below 90% of ``token_budget``, not a
sub-agent, no diminishing returns) and what ``output_config.task_budget`` says upstream.

Details: docs/internals/loop.md
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from loop.config import LoopConfig
from loop.context.kinds import Outcome
from loop.events import Compaction, ContextBoundary, LoopEvent
from loop.messages import JSONObject, Message, user_message
from loop.transitions import TokenBudgetContinuation

COMPLETION_THRESHOLD = 0.9
"""Continue while the run's output is below this share of the budget."""
DIMINISHING_TOKENS = 500
"""A continuation producing fewer output tokens than this is a small one."""
DIMINISHING_AFTER = 3
"""Two small continuations in a row stop the run once this many continuations were made."""
TASK_BUDGET_BETA = "task-budgets-2026-03-13"


@dataclass(frozen=True, slots=True)
class BudgetState:
    output_tokens: int = 0
    """Output tokens of the run's model responses so far (the budget's "turn tokens")."""
    continuations: int = 0
    checked_tokens: int = 0
    """``output_tokens`` at the last continuation."""
    last_delta: int = 0
    """Output tokens between the last two continuations."""
    carried: int | None = None
    """Output tokens spent before the history was last rewritten by a compaction (``None``: never
    rewritten): what ``remaining`` is computed from."""

    def record(self, output_tokens: int) -> BudgetState:
        return replace(self, output_tokens=self.output_tokens + output_tokens)

    def compacted(self) -> BudgetState:
        return replace(self, carried=self.output_tokens)

    def continued(self) -> BudgetState:
        return replace(
            self,
            continuations=self.continuations + 1,
            checked_tokens=self.output_tokens,
            last_delta=self.output_tokens - self.checked_tokens,
        )


def check_budget(budget: BudgetState, total: int | None, *, subagent: bool) -> TokenBudgetContinuation | None:
    """The continuation the budget asks for after a completed turn, or ``None`` (stop)."""
    if subagent or total is None:
        return None
    turn_tokens = budget.output_tokens
    delta = turn_tokens - budget.checked_tokens
    diminishing = (
        budget.continuations >= DIMINISHING_AFTER
        and delta < DIMINISHING_TOKENS
        and budget.last_delta < DIMINISHING_TOKENS
    )
    if diminishing or turn_tokens >= total * COMPLETION_THRESHOLD:
        return None
    return TokenBudgetContinuation(turn_tokens, total, budget.continuations + 1)


def nudge_message(continuation: TokenBudgetContinuation) -> Message:
    used, total = continuation.turn_tokens, continuation.budget
    percent = used * 100 // total
    return user_message(
        f"Token budget: {used:,} of {total:,} output tokens used ({percent}%), {total - used:,} left. "
        "Keep working on the task: do not summarise what you did or stop early; end your turn only "
        "when the work is really finished."
    )


def task_budget(budget: BudgetState, total: int) -> JSONObject:
    """The request's ``output_config.task_budget``."""
    param: JSONObject = {"type": "tokens", "total": total}
    if budget.carried is not None:
        param["remaining"] = max(0, total - budget.carried)
    return param


def send_task_budget(config: LoopConfig, provider: str | None) -> bool:
    """Whether requests carry ``output_config.task_budget``: as configured, or (``None``) when the
    caller's upstream is the first-party API (``provider == "anthropic"``: the beta is its own)."""
    if config.token_budget is None:
        return False
    if config.task_budget_upstream is not None:
        return config.task_budget_upstream
    return provider == "anthropic"


def history_rewritten(event: LoopEvent) -> bool:
    """A context layer removed or replaced part of the history: the upstream no longer sees what
    was spent in it, so ``remaining`` is sent from then on."""
    if isinstance(event, ContextBoundary):
        return True
    return isinstance(event, Compaction) and event.outcome in (Outcome.APPLIED, Outcome.TRUNCATED)
