"""Running sub-agents: nested ``query()`` runs as tasks with states, bounds and a kill switch.

Budgets nest (a child draws from its parent's) and no child outlives its parent; every state
change is a ``TaskUpdate`` given to ``sink``.

Details: docs/internals/loop-subagents.md
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from loop.config import LoopConfig
from loop.deps import LoopDeps
from loop.events import TaskState, TaskUpdate
from loop.hooks.child import ChildHooks
from loop.messages import blocks_view
from loop.run import Run
from loop.subagents.budget import Allowance, NestedBudget
from loop.subagents.definition import AgentDefinition, SubagentConfig
from loop.tools.base import Tool
from loop.tools.permissions import (
    PermissionCallback,
    PermissionPolicy,
    PermissionRequest,
    PermissionVerdict,
    resolve,
)
from loop.transitions import (
    AbortedStreaming,
    Completed,
    Guardrail,
    GuardrailKind,
    GuardrailReport,
    ModelError,
    Terminal,
    describe,
)
from loop.usage import TokenUsage

if TYPE_CHECKING:
    from loop.hooks.runner import HookRunner
    from loop.params import QueryFunction

log = logging.getLogger("switchyard.loop")


@dataclass(frozen=True, slots=True)
class TaskResult:
    state: TaskState
    terminal: Terminal
    usage: TokenUsage
    text: str
    """The child's final answer (completed), or what went wrong, with what it had said."""


class SubagentTask:
    """One child. ``kill()`` cancels it alone; ``await pool.wait(task)`` for its result."""

    def __init__(self, task_id: str, agent: AgentDefinition, description: str) -> None:
        self._task_id = task_id
        self.agent = agent
        self.description = description
        self.state = TaskState.PENDING
        self.run: Run | None = None
        self.result: TaskResult | None = None
        self._task: asyncio.Task[None] | None = None
        self._killed = False

    @property
    def task_id(self) -> str:
        return self._task_id

    def kill(self) -> bool:
        if self.state.final or self._task is None:
            return False
        self._killed = True
        self._task.cancel()
        return True


class SubagentPool:
    def __init__(
        self,
        config: SubagentConfig,
        *,
        parent_config: LoopConfig,
        deps: LoopDeps,
        permissions: PermissionPolicy,
        can_use_tool: PermissionCallback | None,
        budget: NestedBudget,
        run_query: QueryFunction,
        parent_model: Callable[[], str] | None = None,
        sink: Callable[[TaskUpdate], None] | None = None,
        hooks: HookRunner | None = None,
    ) -> None:
        """``deps``: the parent's (its model caller resolved: children share it). ``permissions``
        and ``can_use_tool``: the parent's, asked by children in ``bubble`` mode. ``run_query``:
        ``loop.query.query`` (a child is a run of the loop itself). ``hooks``: the parent's hook
        runner: its hooks run in the children too (``SubagentStart``, tool hooks,
        ``SubagentStop``)."""
        self._hooks = hooks
        self._run_query = run_query
        self.config = config
        self.budget = budget
        self.sink = sink
        self._parent_config = parent_config
        self._deps = deps
        self._permissions = permissions
        self._can_use_tool = can_use_tool
        self._parent_model = parent_model or (lambda: parent_config.model)
        self._slots = asyncio.Semaphore(config.max_concurrent)
        self._ids = itertools.count(1)
        self.tasks: dict[str, SubagentTask] = {}

    @classmethod
    def create(
        cls,
        config: SubagentConfig,
        *,
        loop_config: LoopConfig,
        deps: LoopDeps,
        permissions: PermissionPolicy | None = None,
        can_use_tool: PermissionCallback | None = None,
        sink: Callable[[TaskUpdate], None] | None = None,
        run_query: QueryFunction,
    ) -> SubagentPool:
        """A pool for Python code (no parent run): the children share ``loop_config``'s token and
        cost budgets and wall clock from now, and ask ``permissions`` / ``can_use_tool``."""
        if deps.call_model is None:
            raise ValueError("SubagentPool.create needs deps.call_model (the children's model caller)")
        start = deps.clock.now()
        deadline = None if loop_config.max_wall_clock_s is None else start + loop_config.max_wall_clock_s
        budget = NestedBudget(
            max_tokens=loop_config.max_total_tokens,
            max_cost_usd=loop_config.max_cost_usd,
            max_cache_reads=loop_config.max_cache_read_tokens,
            deadline=deadline,
            share=config.budget_share,
            parent_spent=TokenUsage,
        )
        return cls(
            config,
            parent_config=loop_config,
            deps=deps,
            permissions=permissions or PermissionPolicy(),
            can_use_tool=can_use_tool,
            budget=budget,
            sink=sink,
            run_query=run_query,
        )

    def spawn(
        self,
        prompt: str,
        *,
        agent: str | None = None,
        description: str = "",
        tools: Sequence[str] | None = None,
        model: str | None = None,
    ) -> SubagentTask:
        """Start a child on ``prompt`` (``agent``: a definition's name; ``None``: the first).
        ``tools`` narrows the definition's tool set. Raises ``ValueError`` for an unknown agent or
        tool name."""
        definition = self.config.agent(agent)
        if definition is None:
            known = ", ".join(a.name for a in self.config.agents)
            raise ValueError(f"unknown agent type {agent!r}; known: {known}")
        chosen = _narrowed(definition, tools)
        task = SubagentTask(f"agent_{next(self._ids)}", definition, description or definition.name)
        self.tasks[task.task_id] = task
        self._update(task, TaskState.PENDING)
        task._task = asyncio.create_task(
            self._main(task, prompt, chosen, model), name=f"subagent:{task.task_id}"
        )
        return task

    async def wait(self, task: SubagentTask) -> TaskResult:
        """The child's result. Cancelled meanwhile: the child is killed and waited for first."""
        assert task._task is not None
        try:
            await asyncio.shield(task._task)
        except asyncio.CancelledError:
            task.kill()
            with contextlib.suppress(asyncio.CancelledError):
                await task._task
            raise
        assert task.result is not None
        return task.result

    async def aclose(self) -> None:
        """Kill every child still pending or running, and wait for them."""
        running = [t for t in self.tasks.values() if t.kill() and t._task is not None]
        for task in running:
            assert task._task is not None
            with contextlib.suppress(asyncio.CancelledError):
                await task._task

    def _update(self, task: SubagentTask, state: TaskState) -> None:
        task.state = state
        result = task.result
        if self.sink is not None:
            self.sink(
                TaskUpdate(
                    task.task_id,
                    task.agent.name,
                    task.description,
                    state,
                    task,
                    terminal=result.terminal if result is not None else None,
                    usage=result.usage if result is not None else None,
                    result=result.text if result is not None else "",
                )
            )

    async def _main(
        self, task: SubagentTask, prompt: str, tools: Sequence[Tool[Any]], model: str | None
    ) -> None:
        clock = self._deps.clock
        allowance: Allowance | None = None
        try:
            async with self._slots:
                allowance = self.budget.reserve(clock.now())
                exhausted = allowance.exhausted
                if exhausted is not None:
                    self._finish(task, TaskState.FAILED, _no_budget(exhausted, allowance), TokenUsage(), "")
                    return
                self._update(task, TaskState.RUNNING)
                run = task.run = self._child_run(task, prompt, tools, model, allowance)
                timed_out = False
                try:
                    if allowance.seconds is None:
                        await run.wait()
                    else:
                        async with clock.timeout(allowance.seconds):
                            await run.wait()
                except TimeoutError:
                    timed_out = True
                finally:
                    await run.aclose()
                terminal = run.terminal
                if timed_out:
                    terminal = _out_of_time(allowance, run)
                state = TaskState.COMPLETED if isinstance(terminal, Completed) else TaskState.FAILED
                self._finish(task, state, terminal, run.state.usage, _final_text(run), allowance)
        except Exception as exc:  # a crash in the child's run is the child's failure, not the parent's
            log.warning("sub-agent %s (%s) failed: %s", task.task_id, task.agent.name, exc, exc_info=True)
            crashed = ModelError("client_error", f"{type(exc).__name__}: {exc}")
            self._finish(task, TaskState.FAILED, crashed, TokenUsage(), "", allowance)
        except asyncio.CancelledError:
            run_ = task.run
            terminal = run_.terminal if run_ is not None and run_.finished else AbortedStreaming(turn=0)
            usage = run_.state.usage if run_ is not None and run_.finished else TokenUsage()
            text = _final_text(run_) if run_ is not None and run_.finished else ""
            self._finish(task, TaskState.KILLED, terminal, usage, text, allowance)
            if not task._killed:
                raise

    def _finish(
        self,
        task: SubagentTask,
        state: TaskState,
        terminal: Terminal,
        usage: TokenUsage,
        text: str,
        allowance: Allowance | None = None,
    ) -> None:
        if allowance is not None:
            self.budget.release(allowance, usage)
        if state is TaskState.FAILED:
            text = f"The {task.agent.name} agent failed ({_describe(terminal)})." + (
                f" Its last words: {text}" if text else ""
            )
        elif state is TaskState.KILLED:
            text = f"The {task.agent.name} agent was stopped before it finished." + (
                f" Its last words: {text}" if text else ""
            )
        task.result = TaskResult(state, terminal, usage, text)
        self._update(task, state)

    def _child_run(
        self,
        task: SubagentTask,
        prompt: str,
        tools: Sequence[Tool[Any]],
        model: str | None,
        allowance: Allowance,
    ) -> Run:
        parent, agent = self._parent_config, task.agent
        config = replace(
            parent,
            model=model or agent.model or self._parent_model(),
            max_turns=agent.max_turns or parent.max_turns,
            max_total_tokens=allowance.tokens,
            max_cost_usd=allowance.cost_usd,
            max_cache_read_tokens=allowance.cache_reads,
            max_wall_clock_s=allowance.seconds,
            source=f"agent:{agent.name}",
            subagent=True,  # never continues on the token budget: it is the top-level run's
            token_budget=None,  # nor tells the upstream about it (output_config.task_budget)
            stream_events=False,
        )
        permissions = PermissionPolicy(mode=agent.permission_mode, parent=self._ask_parent)
        from loop.params import QueryParams  # not at import: loop.params imports this package

        return self._run_query(
            QueryParams(
                messages=prompt,
                system=agent.system,
                tools=tools,
                config=config,
                deps=self._deps,
                permissions=permissions,
                parent_hooks=None
                if self._hooks is None
                else ChildHooks(self._hooks, task.task_id, agent.name),
            )
        )

    async def _ask_parent(self, request: PermissionRequest) -> PermissionVerdict:
        """``bubble``: the parent decides, with its own mode, rules and callback."""
        return await resolve(self._permissions, request, self._can_use_tool)


def _narrowed(agent: AgentDefinition, names: Sequence[str] | None) -> list[Tool[Any]]:
    own = [tool for tool in agent.tools if not _starts_subagents(tool)]  # children start none
    if names is None:
        return own
    available = {tool.name: tool for tool in own}
    unknown = [name for name in names if name not in available]
    if unknown:
        raise ValueError(
            f"the {agent.name} agent has no tool {', '.join(unknown)}; its tools: {', '.join(available) or '(none)'}"
        )
    return [available[name] for name in dict.fromkeys(names)]


def _starts_subagents(tool: Tool[Any]) -> bool:
    """The ``agent`` tool (``loop.subagents.tool``, which imports this module): it holds a pool."""
    return isinstance(getattr(tool, "pool", None), SubagentPool)


def _final_text(run: Run) -> str:
    for message in reversed(run.state.messages):
        if message.get("role") == "assistant":
            return "\n".join(
                str(b.get("text", "")) for b in blocks_view(message) if b.get("type") == "text"
            ).strip()
    return ""


def _no_budget(kind: str, allowance: Allowance) -> Guardrail:
    if kind == "tokens":
        detail = "the parent's token budget has nothing left for a sub-agent"
        return Guardrail(GuardrailKind.TOKENS, GuardrailReport(0, float(allowance.tokens or 0), 0, detail))
    if kind == "cost":
        detail = "the parent's cost budget has nothing left for a sub-agent"
        return Guardrail(GuardrailKind.COST, GuardrailReport(0, allowance.cost_usd or 0.0, 0, detail))
    if kind == "cache_read_tokens":
        detail = "the parent's cache-read budget has nothing left for a sub-agent"
        report = GuardrailReport(0, float(allowance.cache_reads or 0), 0, detail)
        return Guardrail(GuardrailKind.CACHE_READ_TOKENS, report)
    detail = "the parent's wall-clock budget has run out"
    return Guardrail(GuardrailKind.WALL_CLOCK, GuardrailReport(0, float(allowance.seconds or 0), 0, detail))


def _out_of_time(allowance: Allowance, run: Run) -> Guardrail:
    seconds = allowance.seconds or 0.0
    detail = f"stopped at the parent's deadline, after {seconds:g}s"
    return Guardrail(
        GuardrailKind.WALL_CLOCK, GuardrailReport(seconds, seconds, run.state.turn_count, detail)
    )


def _describe(terminal: Terminal) -> str:
    fields = describe(terminal)
    reason = fields.pop("reason")
    report = fields.get("report")
    if isinstance(report, dict):
        return f"{reason}: {report['detail']}"
    details = ", ".join(f"{k}={v}" for k, v in fields.items() if v not in (None, "", [], {}))
    return f"{reason}: {details}" if details else str(reason)
