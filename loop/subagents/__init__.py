"""Sub-agents: nested ``query()`` runs with their own history, tools, model and permission mode.

Give a run ``QueryParams(subagents=SubagentConfig(agents=[AgentDefinition(...)]))``: its model
gets the ``agent`` tool, and each call starts a child whose state changes (``TaskUpdate``:
pending → running → completed | failed | killed) come out on the parent's event stream. Budgets
nest, a parent's abort kills its children. ``SubagentPool`` is the same machinery for Python code;
``parse_agents`` / ``load_agents`` read Claude Code's agents JSON.

Public: ``__all__``; the modules inside are internal.
"""

from loop.subagents.agents_file import load_agents, parse_agents
from loop.subagents.budget import Allowance, NestedBudget
from loop.subagents.definition import GENERAL_PURPOSE, AgentDefinition, SubagentConfig
from loop.subagents.pool import SubagentPool, SubagentTask, TaskResult
from loop.subagents.tool import AgentInput, AgentTool

__all__ = [
    "GENERAL_PURPOSE",
    "AgentDefinition",
    "AgentInput",
    "AgentTool",
    "Allowance",
    "NestedBudget",
    "SubagentConfig",
    "SubagentPool",
    "SubagentTask",
    "TaskResult",
    "load_agents",
    "parse_agents",
]
