"""What a sub-agent is: its definition (system prompt, tools, model, permission mode) and the
pool's settings (how many run at once, what share of the parent's budget one may take)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from loop.request import SystemPrompt
from loop.system_prompt import AgentPrompt
from loop.tools.base import Tool
from loop.tools.permissions import PermissionMode

GENERAL_PURPOSE = "general-purpose"
DEFAULT_MAX_CONCURRENT = 4


@dataclass(frozen=True, slots=True)
class AgentDefinition:
    """A kind of sub-agent the parent (or its model, through the ``agent`` tool) can start."""

    name: str
    description: str
    """What it is for: shown to the model in the ``agent`` tool's description."""
    system: SystemPrompt | AgentPrompt = None
    tools: Sequence[Tool[Any]] = ()
    """Its own tool set (a call may narrow it further, never widen it). Sub-agents do not get the
    ``agent`` tool: they cannot start sub-agents of their own."""
    model: str | None = None
    """``None``: the model the parent uses at the moment (its fallback model after a switch)."""
    permission_mode: PermissionMode = PermissionMode.BUBBLE
    """``bubble``: every permission question goes to the parent (its mode, rules and callback)."""
    max_turns: int | None = None
    """``None``: the parent's ``max_turns``."""

    def __post_init__(self) -> None:
        if not self.name or not self.name.replace("-", "").replace("_", "").isalnum():
            raise ValueError(f"an agent name is letters, digits, '-' and '_': {self.name!r}")


@dataclass(frozen=True, slots=True)
class SubagentConfig:
    """``QueryParams.subagents``: the agents a run may start, and the bounds on them."""

    agents: Sequence[AgentDefinition] = ()
    """The first is the default (a call without ``subagent_type``)."""
    max_concurrent: int = DEFAULT_MAX_CONCURRENT
    """Sub-agents running at once; more wait, ``pending``."""
    budget_share: float = 0.5
    """A child may spend at most this share of the token budget the parent has left when it starts
    (what its running siblings reserved is not left), so the parent always keeps some to finish.
    Its wall clock is the parent's: a child never outlives its parent's deadline."""

    def __post_init__(self) -> None:
        if not self.agents:
            raise ValueError("SubagentConfig needs at least one AgentDefinition")
        names = [agent.name for agent in self.agents]
        if len(set(names)) != len(names):
            raise ValueError(f"two agents share a name: {names}")
        if self.max_concurrent < 1:
            raise ValueError("SubagentConfig.max_concurrent must be >= 1")
        if not 0 < self.budget_share <= 1:
            raise ValueError("SubagentConfig.budget_share must be in (0, 1]")

    def agent(self, name: str | None) -> AgentDefinition | None:
        if name is None:
            return self.agents[0]
        return next((agent for agent in self.agents if agent.name == name), None)
