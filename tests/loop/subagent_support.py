"""Helpers for the sub-agent tests: a model caller that routes each request to the fake model of
the conversation it belongs to (parent and children run concurrently, so one script cannot serve
them in order), and a run with sub-agents on a virtual clock."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

import loop
from loop.deps import ModelStreamItem
from loop.request import ModelRequest
from loop.subagents import AgentDefinition, SubagentConfig
from loop.testing import FakeModel, FakeResponse, VirtualClock, tool_use
from loop.tools import PermissionMode, PermissionPolicy, Tool

PARENT = "parent task"


class Routed:
    """A ``ModelCaller``: the request's first user message names the conversation (the parent's
    prompt, or the prompt a child was started with)."""

    def __init__(self, routes: dict[str, FakeModel]) -> None:
        self.routes = routes
        self.bodies: list[dict[str, Any]] = []

    async def __call__(self, request: ModelRequest) -> AsyncIterator[ModelStreamItem]:
        self.bodies.append(request.body)
        first = request.body["messages"][0]["content"][0]["text"]
        async for item in self.routes[first](request):
            yield item


def agent_call(prompt: str, *, id: str | None = None, **extra: Any) -> dict[str, Any]:
    return tool_use("agent", {"description": f"do {prompt}", "prompt": prompt, **extra}, id=id)


def subagent_run(
    parent: Sequence[FakeResponse],
    children: dict[str, Sequence[FakeResponse] | FakeModel],
    *,
    child_tools: Sequence[Tool[Any]] = (),
    clock: VirtualClock | None = None,
    permissions: PermissionPolicy | None = None,
    can_use_tool: Any = None,
    max_concurrent: int = 4,
    **config: Any,
) -> tuple[loop.Run, Routed]:
    clock = clock or VirtualClock()
    routes = {PARENT: FakeModel(parent, clock=clock)}
    for prompt, script in children.items():
        routes[prompt] = script if isinstance(script, FakeModel) else FakeModel(script, clock=clock)
    model = Routed(routes)
    agents = SubagentConfig(
        agents=[
            AgentDefinition(
                "worker", "Does one piece of the work.", system="You are a worker.", tools=child_tools
            )
        ],
        max_concurrent=max_concurrent,
    )
    params = loop.QueryParams(
        messages=PARENT,
        config=loop.LoopConfig(**config),
        deps=loop.LoopDeps(call_model=model, clock=clock),
        permissions=permissions or PermissionPolicy(mode=PermissionMode.DEFAULT),
        can_use_tool=can_use_tool,
        subagents=agents,
    )
    return loop.query(params), model


def live_tasks() -> list[asyncio.Task[Any]]:
    """Sub-agent and tool tasks still running."""
    return [
        t for t in asyncio.all_tasks() if t.get_name().startswith(("subagent:", "tool:")) and not t.done()
    ]
