"""The agent loop: an async generator that only does I/O and yields.

Each iteration: guardrails (pure) → the context layers (:mod:`loop.context.pipeline`: tool-result
budget, snip, microcompact, collapse, auto-compact, then the thinking rules and the pairing
normaliser) → the blocking limit on what they produced → request → stream (events yielded as they
arrive, except ``error`` events, held back until the loop knows it cannot recover; safe tool calls
start as their blocks complete) → ``decide`` (pure) → stop hooks after a completed turn → tools →
``advance`` (pure) → next iteration, or a terminal reported to the ``Run``. Every decision lives
in ``decide``, ``guardrails``, ``advance`` and the layers.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import os
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import BaseModel

from loop import fallback
from loop.advance import advance, conclude, interrupt, record_response, submitted, with_interruption
from loop.budget import TASK_BUDGET_BETA, history_rewritten, send_task_budget, task_budget
from loop.calls import guarded
from loop.config import LoopConfig
from loop.context.microcompact import CONTEXT_MANAGEMENT_BETA, SERVER_EDIT_PROVIDERS, server_edits
from loop.context.pipeline import ContextPipeline, Prepared, server_applied_event
from loop.context.session import ContextSession
from loop.context.settings import ContextSettings
from loop.context.state import ContextState
from loop.decide import after_completion, current_max_tokens, decide
from loop.deps import Clock, LoopDeps, ModelCaller
from loop.events import (
    AssistantMessage,
    LoopEvent,
    StatusEvent,
    StreamEvent,
    Tombstone,
    ToolResults,
    TransitionEvent,
)
from loop.fallback import current_model
from loop.guardrails import check_blocking, check_guardrails
from loop.hooks import lifecycle, wiring
from loop.hooks.settings import HookSettings
from loop.messages import (
    INTERRUPTION_MESSAGE,
    INTERRUPTION_TOOLS_MESSAGE,
    Block,
    JSONObject,
    Message,
    tool_result_block,
    tool_results_message,
    user_message,
)
from loop.observer import RunObserver
from loop.outcome import TurnOutcome
from loop.request import SystemPrompt, build_request, system_blocks
from loop.run import Run
from loop.state import LoopState, initial_state
from loop.stop_hooks import StopHook
from loop.stream import TurnAccumulator
from loop.structured import OutputSpec, check_output, with_instructions, with_output_format
from loop.subagents.budget import NestedBudget
from loop.subagents.definition import SubagentConfig
from loop.subagents.pool import SubagentPool
from loop.subagents.tool import AgentTool
from loop.system_prompt import AgentPrompt
from loop.tokens import estimate_json_tokens
from loop.tools.base import Tool
from loop.tools.builtin.read_tool_result import NAME as READ_TOOL_RESULT
from loop.tools.builtin.read_tool_result import ReadToolResult
from loop.tools.executor import StreamingToolExecutor
from loop.tools.permissions import PermissionCallback, PermissionPolicy
from loop.tools.registry import ToolRegistry
from loop.transitions import (
    AbortedStreaming,
    AbortedTools,
    Completed,
    HookStopped,
    ModelFallback,
    NextTurn,
    OverloadRetry,
    PermissionDenied,
    StopHookLimit,
    StopHookPrevented,
    SubmitInterrupt,
    Terminal,
    Transition,
)

log = logging.getLogger("switchyard.loop")
KNOWN_PROVIDERS = frozenset({"anthropic", "bedrock", "vertex", "foundry"})


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


def query(params: QueryParams) -> Run:
    """Start nothing yet: the returned ``Run`` begins on its first ``__anext__``."""
    if isinstance(params.messages, str):
        messages: tuple[Message, ...] = (user_message(params.messages),)
    else:
        messages = tuple(params.messages)
    return Run(lambda run: _drive(params, run), messages, params.observers)


class _Phase(enum.Enum):
    STREAMING = "streaming"
    TOOLS = "tools"


@dataclass(slots=True)
class _Turn:
    """The pieces of the iteration in flight (what an abort has to wind down)."""

    number: int
    accumulator: TurnAccumulator
    executor: StreamingToolExecutor
    phase: _Phase = _Phase.STREAMING
    outcome: TurnOutcome | None = None
    settled: bool = False
    """The state already holds this turn (an abort now has nothing left to wind down)."""

    def partial(self) -> TurnOutcome:
        return self.outcome if self.outcome is not None else self.accumulator.outcome()


async def _drive(params: QueryParams, run: Run) -> AsyncGenerator[LoopEvent, None]:
    config, deps = params.config, params.deps
    clock = deps.clock
    session = params.session if params.session is not None else ContextSession()
    tools = list(params.tools)
    if config.context.enabled and all(t.name != READ_TOOL_RESULT for t in tools):
        tools.append(ReadToolResult(session.store))
    caller, close_caller = _resolve_caller(deps)
    state = initial_state((*run.initial_messages, *run.take_submitted()), clock.now())
    hooks = wiring.hook_runner(  # an agent judge gets the read-only tools, never the agent tool
        params.hooks,
        caller=caller,
        clock=clock,
        model=lambda: current_model(state, config),
        permissions=params.permissions,
        tools=tools,
    )
    pool: SubagentPool | None = None
    if params.subagents is not None:
        pool = _subagent_pool(params, replace(deps, call_model=caller), lambda: state)
        tools = [*tools, AgentTool(pool)]  # the child's own deadline is the parent's
    registry = ToolRegistry(tools)
    tool_definitions = registry.definitions()
    dispatcher = wiring.dispatcher(
        registry,
        hooks,
        clock=clock,
        policy=params.permissions,
        can_use_tool=params.can_use_tool,
        default_timeout_s=config.tool_timeout_s,
        truncate_results=not config.context.enabled,
        tool_deps=params.tool_deps,
    )
    output = params.output_spec
    system, system_betas = await _system(params.system, session, caller, tool_definitions)
    if output is not None:
        system = with_instructions(system, output)
    overhead = estimate_json_tokens([*system_blocks(system, cache=False), *tool_definitions])
    settings = ContextSettings(
        config.context,
        config.effective_window,
        config.blocking_buffer_tokens,
        {tool.name: tool.max_result_size_chars for tool in registry},
        overhead_tokens=overhead,
        thinking=config.thinking_budget_tokens is not None,
        server_edits=_server_edits(config, caller),
    )
    pipeline = ContextPipeline(
        settings,
        config,
        session=session,
        caller=wiring.model_caller(caller, hooks),
        clock=clock,
        uuid=deps.uuid,
        layers=deps.layers,
    )
    send_budget = send_task_budget(config, getattr(getattr(caller, "provider", None), "name", None))
    tokens, covered = session.reported_context(state.messages, overhead) or (overhead, 0)
    state = replace(
        state,
        context_tokens=tokens,
        context_message_count=covered,
        context=ContextState(overhead_tokens=overhead, learned_limit=session.learned_limit),
    )
    turn: _Turn | None = None
    reuse: dict[str, Block] = {}
    """Results of calls a dropped (tombstoned) response ran: the retry reuses them."""
    try:
        if hooks is not None:
            started, stopped = await lifecycle.begin(hooks, state.messages)
            state = lifecycle.charge(state, hooks)
            if stopped is not None:
                run.settle(stopped, state)
                return
            if started != state.messages:
                covered = min(state.context_message_count, len(started) - 1)
                state = replace(state, messages=started, context_message_count=covered)
        while True:
            turn = None
            queued = run.take_submitted()
            if queued:  # submitted between turns: nothing to interrupt
                state = replace(state, messages=(*state.messages, *queued))
            stop = check_guardrails(state, config, clock.now())
            if stop is not None:
                run.settle(stop, state)
                return
            prepared: Prepared | None = None
            rewritten = False
            async for step in pipeline.run(state):
                if isinstance(step, Prepared):
                    prepared = step
                else:
                    rewritten = rewritten or history_rewritten(step)
                    yield step
            if prepared is None:  # pragma: no cover - the pass always ends with one
                raise RuntimeError("the context pass ended without a result")
            state = prepared.state
            if rewritten:
                state = replace(state, budget=state.budget.compacted())
            if hooks is not None:
                hooks.note_history(state.messages)
            blocked = check_blocking(prepared.tokens, prepared.thresholds.blocking, config)
            if blocked is not None:
                run.settle(blocked, state)
                return
            thinking = state.context.thinking_budget or config.thinking_budget_tokens
            request = build_request(
                state.messages,
                config,
                system=system,
                tools=tool_definitions,
                max_tokens=current_max_tokens(state, config),
                request_id=deps.uuid(),
                thinking_budget=thinking if pipeline.thinking_enabled(state) else None,
                context_management=server_edits(settings, state.context.learned_limit)
                if settings.server_edits
                else None,
                extra_betas=(
                    *system_betas,
                    *((CONTEXT_MANAGEMENT_BETA,) if settings.server_edits else ()),
                    *((TASK_BUDGET_BETA,) if send_budget else ()),
                ),
                task_budget=task_budget(state.budget, config.token_budget)
                if send_budget and config.token_budget is not None
                else None,
                model=current_model(state, config),
            )
            if output is not None:
                request = with_output_format(request, output)
            turn = _Turn(
                number=state.turn_count + 1,
                accumulator=TurnAccumulator(),
                executor=StreamingToolExecutor(
                    dispatcher,
                    turn=state.turn_count + 1,
                    clock=clock,
                    max_concurrency=config.max_tool_concurrency,
                    reuse=reuse,
                ),
            )
            reuse = {}
            run.on_submit(turn.executor.interrupt)
            if pool is not None:
                pool.sink = turn.executor.emit
            held: list[StreamEvent] = []
            switched_to: str | None = None
            async with aclosing(guarded(caller, request)) as stream:
                async for item in stream:
                    if run.has_submitted():
                        break
                    if isinstance(item, StatusEvent):
                        if item.kind == "fallback" and item.model is not None:
                            switched_to = item.model  # the caller fell back by itself: sticky
                        yield item
                        continue
                    tool_use = turn.accumulator.feed(item)
                    if item.get("type") == "error":
                        held.append(StreamEvent(turn.number, item))  # withheld until decided
                        break
                    if config.stream_events:
                        yield StreamEvent(turn.number, item)
                    if tool_use is not None:
                        turn.executor.submit(tool_use)
                    for tool_event in turn.executor.drain():
                        yield tool_event
            if run.has_submitted():
                state = record_response(state, turn.partial())
                async for event in _submitted(run, turn, state):
                    if isinstance(event, LoopState):
                        state = event
                    else:
                        yield event
                continue
            outcome = turn.outcome = turn.accumulator.outcome()
            state = fallback.sticky(record_response(state, outcome), switched_to)
            if outcome.context_cleared_tokens:
                yield server_applied_event(
                    turn.number, outcome.usage.context_tokens, outcome.context_cleared_tokens
                )
            decision = decide(state, outcome, config)
            if isinstance(decision, Completed):
                answers = await lifecycle.stop_answers(params.stop_hooks, hooks, state, outcome, config)
                state = lifecycle.charge(state, hooks)
                decision = after_completion(state, decision, answers, config)
            if isinstance(decision, Completed) and output is not None:
                checked = check_output(state, outcome.content, output)
                decision, run.output = checked.decision or decision, checked.value
            if not isinstance(decision, Transition):
                await turn.executor.cancel()
                if config.stream_events:
                    for held_error in held:  # every recovery rung failed: shown now
                        yield held_error
                before = len(state.messages)
                kept = isinstance(decision, StopHookPrevented | StopHookLimit)
                answered = Completed("end_turn") if kept else decision
                state = conclude(state, answered, outcome)
                run.settle(decision, state)
                for event in _appended(turn.number, state, before, outcome):
                    yield event
                return
            if isinstance(decision, NextTurn):
                turn.phase = _Phase.TOOLS
                yield AssistantMessage(
                    turn.number, outcome.assistant_message(), outcome.stop_reason, outcome.usage
                )
                async with aclosing(turn.executor.finish()) as tool_events:
                    async for tool_event in tool_events:
                        yield tool_event
                if pool is not None:  # what the children spent counts for the run's guardrails
                    state = replace(state, usage=state.usage + pool.budget.take_spent())
                interrupted = run.has_submitted()
                if interrupted:
                    async for event in _submitted(run, turn, lifecycle.charge(state, hooks)):
                        if isinstance(event, LoopState):
                            state = event
                        else:
                            yield event
                else:
                    state = lifecycle.charge(
                        advance(state, decision, outcome, turn.executor.results()), hooks
                    )
                    turn.settled = True
                    yield ToolResults(turn.number, state.messages[-1])
                if hooks is not None and hooks.stop_requested is not None:
                    run.settle(HookStopped(*hooks.stop_requested), state)
                    return
                if dispatcher.interruptions:  # a refusal that ends the run (a headless --json run)
                    refused = dispatcher.interruptions[0]
                    run.settle(
                        PermissionDenied(refused.tool_name, refused.tool_use_id, refused.message), state
                    )
                    return
                if interrupted:  # its transition was yielded with the turn's remains
                    continue
            else:
                if isinstance(decision, OverloadRetry | ModelFallback):
                    await turn.executor.wait_started()  # what ran is reused, never run twice
                    for tool_event in turn.executor.drain():
                        yield tool_event
                    reuse = turn.executor.ran()
                    if outcome.message_id is not None or outcome.content:
                        yield _tombstone(turn.number, outcome, reuse, decision.reason)
                    async for event in _overloaded(decision, config, clock):
                        yield event
                await turn.executor.cancel()
                before = len(state.messages)
                state = advance(state, decision, outcome)
                turn.settled = True
                for event in _appended(turn.number, state, before, outcome):
                    yield event
            yield TransitionEvent(turn.number, decision)
    except (GeneratorExit, asyncio.CancelledError):
        if not run.finished:
            run.settle(*await _aborted(state, turn))
        raise
    finally:
        run.on_submit(None)
        if pool is not None:
            await pool.aclose()
        if run.finished:
            final = run.state
            session.remember_context(
                final.messages[: final.context_message_count], final.context_tokens, overhead
            )
        if turn is not None:
            await turn.executor.cancel()
        if hooks is not None:
            await lifecycle.end(hooks, run.state.messages if run.finished else state.messages)
        if close_caller is not None:
            await close_caller()


async def _aborted(state: LoopState, turn: _Turn | None) -> tuple[Terminal, LoopState]:
    """The terminal and final state of a run closed or cancelled now."""
    if turn is None:
        return AbortedStreaming(turn=state.turn_count), state
    await turn.executor.cancel()
    final: LoopState = state
    unfinished: tuple[str, ...] = ()
    if not turn.settled:
        unfinished = turn.executor.unfinished_ids()
        final = interrupt(state, turn.partial(), turn.executor.finished_results())
    if turn.phase is _Phase.TOOLS:
        final = with_interruption(final, INTERRUPTION_TOOLS_MESSAGE)
        return AbortedTools(turn=turn.number, interrupted_tool_use_ids=unfinished), final
    return AbortedStreaming(turn=turn.number), with_interruption(final, INTERRUPTION_MESSAGE)


async def _submitted(run: Run, turn: _Turn, state: LoopState) -> AsyncGenerator[LoopEvent | LoopState, None]:
    """Stop ``turn`` for the messages submitted meanwhile: its events, then the new state."""
    await turn.executor.cancel()
    new = run.take_submitted()
    transition = SubmitInterrupt(turn.number)
    before = len(state.messages)
    outcome = turn.partial()
    state = submitted(state, outcome, turn.executor.finished_results(), new, transition)
    turn.settled = True
    for message in state.messages[before : len(state.messages) - len(new)]:
        if message.get("role") == "assistant":
            if turn.phase is _Phase.STREAMING:  # in the tools phase it was already yielded
                yield AssistantMessage(turn.number, message, outcome.stop_reason, outcome.usage)
        else:
            yield ToolResults(turn.number, message)
    yield TransitionEvent(turn.number, transition)
    yield state


def _tombstone(number: int, outcome: TurnOutcome, ran: dict[str, Block], reason: str) -> Tombstone:
    """The dropped response and an answer for each of its calls (what ran, or a synthetic error)."""
    by_id = {block.get("tool_use_id"): block for block in ran.values()}
    results = [
        by_id.get(tool_use.id) or tool_result_block(tool_use.id, fallback.FALLBACK_RESULT_TEXT, is_error=True)
        for tool_use in outcome.tool_uses
    ]
    return Tombstone(number, outcome.assistant_message(), tool_results_message(results), reason)


async def _overloaded(
    decision: OverloadRetry | ModelFallback, config: LoopConfig, clock: Clock
) -> AsyncGenerator[StatusEvent, None]:
    if isinstance(decision, ModelFallback):
        yield StatusEvent(
            "fallback",
            f"{decision.from_model} is overloaded: switching to {decision.to_model} for the rest of the run",
            error_type=fallback.OVERLOADED_ERROR,
            model=decision.to_model,
        )
        return
    delay = fallback.retry_delay(config, decision.overloads)
    yield StatusEvent(
        "retry",
        f"{decision.model} is overloaded: retrying in {delay:.2f}s (overload {decision.overloads})",
        attempt=decision.overloads,
        delay_s=delay,
        error_type=fallback.OVERLOADED_ERROR,
    )
    await clock.sleep(delay)


def _subagent_pool(params: QueryParams, deps: LoopDeps, current: Callable[[], LoopState]) -> SubagentPool:
    """The run's sub-agent pool: children share its caller and clock, draw from its budgets
    (``current()`` is the run's state as it is now) and ask it for permission."""
    assert params.subagents is not None
    config = params.config
    started = current().started_at
    budget = NestedBudget(
        max_tokens=config.max_total_tokens,
        deadline=None if config.max_wall_clock_s is None else started + config.max_wall_clock_s,
        share=params.subagents.budget_share,
        parent_spent=lambda: current().usage.billed,
    )
    return SubagentPool(
        params.subagents,
        parent_config=config,
        deps=deps,
        permissions=params.permissions,
        can_use_tool=params.can_use_tool,
        budget=budget,
        parent_model=lambda: fallback.current_model(current(), config),
    )


def _appended(number: int, state: LoopState, before: int, outcome: TurnOutcome) -> list[LoopEvent]:
    """Events for the messages the last step appended to the history."""
    events: list[LoopEvent] = []
    for message in state.messages[before:]:
        if message.get("role") == "assistant":
            events.append(AssistantMessage(number, message, outcome.stop_reason, outcome.usage))
        elif any(b.get("type") == "tool_result" for b in message.get("content") or [] if isinstance(b, dict)):
            events.append(ToolResults(number, message))
    return events


async def _system(
    system: SystemPrompt | AgentPrompt,
    session: ContextSession,
    caller: ModelCaller,
    tools: Sequence[JSONObject],
) -> tuple[SystemPrompt, tuple[str, ...]]:
    """The run's system prompt and the betas its cache markers need. An ``AgentPrompt`` is
    assembled with the session's section memo, for the caller's upstream (the first-party API
    when the caller does not say: an Anthropic-compatible URL); the global cache scope only when
    the caller's upstream is the first-party API itself."""
    if not isinstance(system, AgentPrompt):
        return system, ()
    provider = getattr(getattr(caller, "provider", None), "name", None)
    assembled = await system.assemble(
        session.sections,
        provider if provider in KNOWN_PROVIDERS else "anthropic",
        tools=tools,
        global_scope=provider == "anthropic",
    )
    return assembled.blocks, assembled.betas


def _server_edits(config: LoopConfig, caller: ModelCaller) -> bool:
    """Whether microcompact is the upstream's: configured, or (``None``) when the caller's upstream
    accepts the context-management beta (see :mod:`loop.context.microcompact`) and the model is
    one context editing supports (Claude 4 and later: not the ``claude-3`` families)."""
    if not config.context.enabled:
        return False
    if config.context.server_context_edits is not None:
        return config.context.server_context_edits
    provider = getattr(caller, "provider", None)
    return getattr(provider, "name", None) in SERVER_EDIT_PROVIDERS and "claude-3" not in config.model


def _resolve_caller(deps: LoopDeps) -> tuple[ModelCaller, Callable[[], Awaitable[None]] | None]:
    """The injected caller, or the environment's provider (then owned, so closed, by the run)."""
    if deps.call_model is not None:
        return deps.call_model, None
    from loop.callers.provider import ProviderModelCaller

    caller = ProviderModelCaller.from_environ(os.environ)
    return caller, caller.aclose
