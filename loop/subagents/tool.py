"""The ``agent`` tool: the model starts a sub-agent and gets its answer as the tool result.

Several calls in one response run side by side (the tool is concurrency-safe; the pool bounds how
many children run at once). The call's result is the child's final answer; a child that failed or
was killed is an error result saying so (with what it had said). The child's permission questions
go to the parent (``bubble``), so the tool itself needs no permission: it is read-only.
"""

from __future__ import annotations

from pydantic import Field

from loop.events import TaskState
from loop.subagents.pool import SubagentPool
from loop.tools.base import Tool, ToolContext, ToolError, ToolInput

NAME = "agent"
DAY_S = 86_400.0


class AgentInput(ToolInput):
    description: str = Field(description="A short (3-5 word) description of the task.")
    prompt: str = Field(
        description="The task for the agent: everything it needs to know, since it sees nothing else."
    )
    subagent_type: str | None = Field(None, description="Which kind of agent (default: the first listed).")
    tools: list[str] | None = Field(
        None, description="Only these of the agent's tools (default: all of them)."
    )
    model: str | None = Field(None, description="The model it runs on (default: the agent's, else yours).")


class AgentTool(Tool[AgentInput]):
    name = NAME
    input_model = AgentInput
    read_only = True
    max_result_size_chars = 50_000

    def __init__(self, pool: SubagentPool, *, timeout_s: float | None = None) -> None:
        self.pool = pool
        self.timeout_s = timeout_s if timeout_s is not None else DAY_S
        kinds = "\n".join(f"- {a.name}: {a.description}" for a in pool.config.agents)
        self.description = (
            "Start a sub-agent: a separate agent with its own conversation and tools that works on "
            "a task on its own and answers with its result. Start several in one response to run "
            "them in parallel. Available agent types:\n" + kinds
        )

    def is_concurrency_safe(self, tool_input: AgentInput) -> bool:
        return True

    async def call(self, tool_input: AgentInput, context: ToolContext) -> str:
        try:
            task = self.pool.spawn(
                tool_input.prompt,
                agent=tool_input.subagent_type,
                description=tool_input.description,
                tools=tool_input.tools,
                model=tool_input.model,
            )
        except ValueError as exc:
            raise ToolError(str(exc)) from None
        result = await self.pool.wait(task)
        if result.state is TaskState.COMPLETED:
            return result.text or "(the agent finished without a text answer)"
        raise ToolError(f"[{task.task_id}] {result.text}")
