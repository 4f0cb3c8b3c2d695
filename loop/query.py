"""The agent loop: an async generator that only does I/O and yields.

Every decision lives in ``decide``, ``guardrails``, ``advance`` and the context layers (all pure);
keep this module to I/O. Helpers live next door (``loop.params``, ``loop.run_setup``,
``loop.turn``, ``loop.overload``, ``loop.subagents.wiring``).

Details: docs/internals/loop.md
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import replace

from loop import fallback
from loop.advance import advance, conclude, record_response
from loop.budget import TASK_BUDGET_BETA, history_rewritten, send_task_budget, task_budget
from loop.calls import guarded
from loop.context.microcompact import CONTEXT_MANAGEMENT_BETA, server_edits
from loop.context.pipeline import ContextPipeline, Prepared, server_applied_event
from loop.context.session import ContextSession
from loop.context.settings import ContextSettings
from loop.context.state import ContextState
from loop.cost import Pricing
from loop.decide import after_completion, current_max_tokens, decide
from loop.events import (
    AssistantMessage,
    LoopEvent,
    StatusEvent,
    StreamEvent,
    ToolResults,
    TransitionEvent,
)
from loop.fallback import current_model
from loop.guardrails import check_blocking, check_guardrails
from loop.hooks import lifecycle, wiring
from loop.messages import Block, Message, user_message
from loop.overload import overload_events, tombstone
from loop.params import QueryParams
from loop.request import build_request, system_blocks
from loop.run import Run
from loop.run_setup import resolve_caller, server_edits_enabled, system_prompt
from loop.state import LoopState, initial_state
from loop.structured import check_output, with_instructions, with_output_format
from loop.subagents.pool import SubagentPool
from loop.subagents.tool import AgentTool
from loop.subagents.wiring import run_pool
from loop.tokens import estimate_json_tokens
from loop.tools.builtin.read_tool_result import NAME as READ_TOOL_RESULT
from loop.tools.builtin.read_tool_result import ReadToolResult
from loop.tools.executor import StreamingToolExecutor
from loop.tools.registry import ToolRegistry
from loop.transitions import (
    Completed,
    HookStopped,
    ModelFallback,
    NextTurn,
    OverloadRetry,
    PermissionDenied,
    StopHookLimit,
    StopHookPrevented,
    Transition,
)
from loop.turn import Phase, Turn, aborted, appended, submit_interrupt

__all__ = ["QueryParams", "query"]


def query(params: QueryParams) -> Run:
    """Start nothing yet: the returned ``Run`` begins on its first ``__anext__``."""
    if isinstance(params.messages, str):
        messages: tuple[Message, ...] = (user_message(params.messages),)
    else:
        messages = tuple(params.messages)
    return Run(lambda run: _drive(params, run), messages, params.observers)


async def _drive(params: QueryParams, run: Run) -> AsyncGenerator[LoopEvent, None]:
    config, deps = params.config, params.deps
    clock = deps.clock
    session = params.session if params.session is not None else ContextSession()
    tools = list(params.tools)
    if config.context.enabled and all(t.name != READ_TOOL_RESULT for t in tools):
        tools.append(ReadToolResult(session.store))
    caller, close_caller = resolve_caller(deps)
    pricing = Pricing.for_caller(deps.prices, caller)
    state = initial_state((*run.initial_messages, *run.take_submitted()), clock.now())
    hooks = wiring.hook_runner(  # an agent judge gets the read-only tools, never the agent tool
        params.hooks,
        caller=caller,
        clock=clock,
        model=lambda: current_model(state, config),
        permissions=params.permissions,
        tools=tools,
        run_query=query,
        pricing=pricing,
        child_of=params.parent_hooks,
    )
    pool: SubagentPool | None = None
    if params.subagents is not None:
        pool = run_pool(
            params.subagents,
            config,
            deps=replace(deps, call_model=caller),
            permissions=params.permissions,
            can_use_tool=params.can_use_tool,
            current=lambda: state,
            run_query=query,
            hooks=hooks,
        )
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
    system, system_betas = await system_prompt(params.system, session, caller, tool_definitions)
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
        server_edits=server_edits_enabled(config, caller),
    )
    pipeline = ContextPipeline(
        settings,
        config,
        session=session,
        caller=wiring.model_caller(caller, hooks),
        clock=clock,
        uuid=deps.uuid,
        layers=deps.layers,
        pricing=pricing,
    )
    send_budget = send_task_budget(config, getattr(getattr(caller, "provider", None), "name", None))
    tokens, covered = session.reported_context(state.messages, overhead) or (overhead, 0)
    state = replace(
        state,
        context_tokens=tokens,
        context_message_count=covered,
        context=ContextState(overhead_tokens=overhead, learned_limit=session.learned_limit),
    )
    turn: Turn | None = None
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
            spent_on_context = prepared.state.usage != state.usage
            state = prepared.state
            if rewritten:
                state = replace(state, budget=state.budget.compacted())
            stop = check_guardrails(state, config, clock.now()) if spent_on_context else None
            if stop is not None:  # the summarisation call reached a limit: no call after it
                run.settle(stop, state)
                return
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
            turn = Turn(
                number=state.turn_count + 1,
                accumulator=pricing.accumulator(request),
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
                turn.recorded = True
                async for event in submit_interrupt(run, turn, state):
                    if isinstance(event, LoopState):
                        state = event
                    else:
                        yield event
                continue
            outcome = turn.outcome = turn.accumulator.outcome()
            state = fallback.sticky(record_response(state, outcome), switched_to)
            turn.recorded = True
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
                state = _with_children_spend(state, pool)
                if config.stream_events:
                    for held_error in held:  # every recovery rung failed: shown now
                        yield held_error
                before = len(state.messages)
                kept = isinstance(decision, StopHookPrevented | StopHookLimit)
                answered = Completed("end_turn") if kept else decision
                state = conclude(state, answered, outcome)
                run.settle(decision, state)
                for event in appended(turn.number, state, before, outcome):
                    yield event
                return
            if isinstance(decision, NextTurn):
                turn.phase = Phase.TOOLS
                yield AssistantMessage(
                    turn.number, outcome.assistant_message(), outcome.stop_reason, outcome.usage
                )
                async with aclosing(turn.executor.finish()) as tool_events:
                    async for tool_event in tool_events:
                        yield tool_event
                state = _with_children_spend(state, pool)  # counted by the run's guardrails
                interrupted = run.has_submitted()
                if interrupted:
                    async for event in submit_interrupt(run, turn, lifecycle.charge(state, hooks)):
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
                        yield tombstone(turn.number, outcome, reuse, decision.reason)
                    async for event in overload_events(decision, config, clock):
                        yield event
                await turn.executor.cancel()
                before = len(state.messages)
                state = advance(state, decision, outcome)
                turn.settled = True
                for event in appended(turn.number, state, before, outcome):
                    yield event
            yield TransitionEvent(turn.number, decision)
    except (GeneratorExit, asyncio.CancelledError):
        if not run.finished:
            terminal, final = await aborted(state, turn)
            final = lifecycle.charge(final, hooks)  # hook judges and a cut summary were billed too
            final = replace(final, usage=final.usage + pipeline.take_unbooked())
            if pool is not None:  # the children are killed first: what they spent is the run's
                await pool.aclose()
                final = _with_children_spend(final, pool)
            run.settle(terminal, final)
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


def _with_children_spend(state: LoopState, pool: SubagentPool | None) -> LoopState:
    """``state`` with what the sub-agents that ended since the last call spent (tokens and USD,
    a killed child's partial response included) added to the run's usage."""
    if pool is None:
        return state
    spent = pool.budget.take_spent()
    return replace(state, usage=state.usage + spent) if spent.total or spent.cost_usd else state
