"""What a sub-agent's run is given to run its parent's hooks (``QueryParams.parent_hooks``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from loop.hooks.runner import HookRunner


@dataclass(frozen=True, slots=True)
class ChildHooks:
    """The parent's hook runner (its settings and session) and the child's identity (``agent_id``:
    the task id, ``agent_type``: the agent's name, what ``SubagentStart`` / ``SubagentStop``
    matchers see)."""

    parent: HookRunner
    agent_id: str
    agent_type: str
