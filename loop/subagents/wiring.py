"""A run's own sub-agent pool (``QueryParams.subagents``): its children share the run's caller and
clock, draw from its budgets (tokens, cost, wall clock), run on its current model, ask it for
permission, and run its hooks."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from loop import fallback
from loop.config import LoopConfig
from loop.deps import LoopDeps
from loop.state import LoopState
from loop.subagents.budget import NestedBudget
from loop.subagents.definition import SubagentConfig
from loop.subagents.pool import SubagentPool
from loop.tools.permissions import PermissionCallback, PermissionPolicy

if TYPE_CHECKING:
    from loop.hooks.runner import HookRunner
    from loop.params import QueryFunction


def run_pool(
    subagents: SubagentConfig,
    config: LoopConfig,
    *,
    deps: LoopDeps,
    permissions: PermissionPolicy,
    can_use_tool: PermissionCallback | None,
    current: Callable[[], LoopState],
    run_query: QueryFunction,
    hooks: HookRunner | None = None,
) -> SubagentPool:
    """The run's sub-agent pool (``current()`` is the run's state as it is now; ``deps`` carry its
    resolved model caller)."""
    started = current().started_at
    budget = NestedBudget(
        max_tokens=config.max_total_tokens,
        max_cost_usd=config.max_cost_usd,
        max_cache_reads=config.max_cache_read_tokens,
        deadline=None if config.max_wall_clock_s is None else started + config.max_wall_clock_s,
        share=subagents.budget_share,
        parent_spent=lambda: current().usage,
    )
    return SubagentPool(
        subagents,
        parent_config=config,
        deps=deps,
        permissions=permissions,
        can_use_tool=can_use_tool,
        budget=budget,
        parent_model=lambda: fallback.current_model(current(), config),
        run_query=run_query,
        hooks=hooks,
    )
