"""Putting a run's hooks in place: the runner (a sub-agent's made from its parent's), the
dispatcher that raises the tool events, and the model caller that raises ``PreCompact``. Without hook settings, the run's parts are unchanged."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from loop.cost import Pricing
from loop.deps import Clock, ModelCaller
from loop.hooks.child import ChildHooks
from loop.hooks.lifecycle import PreCompactCaller
from loop.hooks.runner import HookRunner
from loop.hooks.settings import HookEvent, HookSettings
from loop.hooks.tools import HookedDispatcher
from loop.tools.base import Tool
from loop.tools.dispatcher import ToolDispatcher
from loop.tools.permissions import PermissionPolicy
from loop.tools.registry import ToolRegistry

if TYPE_CHECKING:
    from loop.params import QueryFunction


def hook_runner(
    settings: HookSettings | None,
    *,
    caller: ModelCaller,
    clock: Clock,
    model: Callable[[], str],
    permissions: PermissionPolicy,
    tools: Sequence[Tool[Any]],
    run_query: QueryFunction,
    pricing: Pricing | None = None,
    child_of: ChildHooks | None = None,
) -> HookRunner | None:
    """The run's runner: from ``settings``, or in a sub-agent's run (``child_of``) from its
    parent's runner (the parent's settings and session, the child's identity)."""
    session_id = None
    if child_of is not None:
        settings, session_id = child_of.parent.settings, child_of.parent.session_id
    if settings is None or not any(settings.has(event) for event in HookEvent):
        return None
    return HookRunner(
        settings,
        session_id=session_id,
        child_of=child_of,
        caller=caller,
        clock=clock,
        model=model,
        permission_mode=permissions.mode.value,
        tools=tools,
        run_query=run_query,
        pricing=pricing,
    )


def dispatcher(registry: ToolRegistry, runner: HookRunner | None, **options: Any) -> ToolDispatcher:
    if runner is not None and (runner.has(HookEvent.PRE_TOOL_USE) or runner.has(HookEvent.POST_TOOL_USE)):
        return HookedDispatcher(registry, runner=runner, **options)
    return ToolDispatcher(registry, **options)


def model_caller(caller: ModelCaller, runner: HookRunner | None) -> ModelCaller:
    if runner is not None and runner.has(HookEvent.PRE_COMPACT):
        return PreCompactCaller(caller, runner)
    return caller
