"""``QueryParams``: everything one ``query()`` run is given (the conversation, the prompt, tools,
config, dependencies, permissions, hooks, sub-agents, the output type)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from loop.config import LoopConfig
from loop.context.session import ContextSession
from loop.deps import LoopDeps
from loop.messages import Message
from loop.observer import RunObserver
from loop.request import SystemPrompt
from loop.run import Run
from loop.stop_hooks import StopHook
from loop.structured import OutputSpec
from loop.system_prompt import AgentPrompt
from loop.tools.base import Tool
from loop.tools.permissions import PermissionCallback, PermissionPolicy

if TYPE_CHECKING:  # annotations only: loading loop.hooks / loop.subagents here would close import cycles
    from loop.hooks.child import ChildHooks
    from loop.hooks.settings import HookSettings
    from loop.subagents.definition import SubagentConfig


@dataclass(frozen=True, slots=True)
class QueryParams:
    messages: str | Sequence[Message]
    """The conversation so far, or just the user's prompt."""
    system: SystemPrompt | AgentPrompt = None
    """Text, blocks, or an ``AgentPrompt`` assembled once per run from its sections (tools +
    static part cached under one breakpoint, the session's part under another)."""
    tools: Sequence[Tool[Any]] = ()
    config: LoopConfig = field(default_factory=LoopConfig)
    deps: LoopDeps = field(default_factory=LoopDeps)
    permissions: PermissionPolicy = field(default_factory=PermissionPolicy)
    can_use_tool: PermissionCallback | None = None
    """Asked before a call the permission mode does not allow outright."""
    session: ContextSession | None = None
    """What outlives this run (circuit breaker, stored tool results): pass the same one to every
    run of a conversation. ``None``: a new one for this run."""
    stop_hooks: Sequence[StopHook] = ()
    """Run, in order, when the model ends its turn without calling a tool."""
    hooks: HookSettings | None = None
    """Stop and lifecycle hooks in Claude Code's settings shape (:mod:`loop.hooks`)."""
    parent_hooks: ChildHooks | None = None
    """Set by the sub-agent pool for a child's run: the parent's hooks apply to it (tool hooks,
    ``SubagentStart``, ``SubagentStop``), with the child's identity (``hooks`` is then unused)."""
    observers: Sequence[RunObserver] = ()
    """Shown every event and the terminal (``gateway.loop_metrics.LoopMetrics`` counts them)."""
    subagents: SubagentConfig | None = None
    """Agents the model may start with the ``agent`` tool (:mod:`loop.subagents`)."""
    tool_deps: object = None
    """The application's dependencies, given to every tool call as ``ToolContext.deps``."""
    output_type: type[BaseModel] | OutputSpec[Any] | None = None
    """The final answer must validate against this model (``run.output`` holds the value); an
    ``OutputSpec`` sets the retries and how the model is asked (see ``loop.structured``)."""

    @property
    def output_spec(self) -> OutputSpec[Any] | None:
        if self.output_type is None or isinstance(self.output_type, OutputSpec):
            return self.output_type
        return OutputSpec(self.output_type)


QueryFunction = Callable[[QueryParams], Run]
"""``loop.query.query``'s type: what runs a nested loop (a sub-agent, an agent judge) is given it,
so the modules the loop itself uses never import the loop (no import cycle)."""
