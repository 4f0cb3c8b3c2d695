"""The agent loop: an async generator that only does I/O and yields.

Each iteration: guardrails (pure) → history preparation (microcompact, compact, normalise) →
request → stream (events yielded as they arrive; safe tool calls start as their blocks complete)
→ ``decide`` (pure) → tools → ``advance`` (pure) → next iteration, or a terminal reported to the
``Run``. Every decision lives in ``decide``, ``guardrails`` and ``advance``.
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

from loop.advance import advance, conclude, interrupt, record_response
from loop.callers.errors import error_event
from loop.config import LoopConfig
from loop.decide import decide
from loop.deps import LoopDeps, ModelCaller, ModelStreamItem
from loop.events import (
    AssistantMessage,
    LoopEvent,
    StatusEvent,
    StreamEvent,
    ToolResults,
    TransitionEvent,
)
from loop.guardrails import check_guardrails
from loop.messages import Message, normalize, user_message
from loop.outcome import TurnOutcome
from loop.request import ModelRequest, SystemPrompt, build_request
from loop.run import Run
from loop.state import LoopState, initial_state
from loop.stream import TurnAccumulator
from loop.tools.base import Tool
from loop.tools.dispatcher import ToolDispatcher
from loop.tools.executor import StreamingToolExecutor
from loop.tools.permissions import PermissionCallback, PermissionPolicy
from loop.tools.registry import ToolRegistry
from loop.transitions import AbortedStreaming, AbortedTools, NextTurn, Terminal, Transition

log = logging.getLogger("switchyard.loop")


@dataclass(frozen=True, slots=True)
class QueryParams:
    messages: str | Sequence[Message]
    """The conversation so far, or just the user's prompt."""
    system: SystemPrompt = None
    tools: Sequence[Tool[Any]] = ()
    config: LoopConfig = field(default_factory=LoopConfig)
    deps: LoopDeps = field(default_factory=LoopDeps)
    permissions: PermissionPolicy = field(default_factory=PermissionPolicy)
    can_use_tool: PermissionCallback | None = None
    """Asked before a call the permission mode does not allow outright."""


def query(params: QueryParams) -> Run:
    """Start nothing yet: the returned ``Run`` begins on its first ``__anext__``."""
    if isinstance(params.messages, str):
        messages: tuple[Message, ...] = (user_message(params.messages),)
    else:
        messages = tuple(params.messages)
    return Run(lambda run: _drive(params, run), messages)


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
    registry = ToolRegistry(params.tools)
    tool_definitions = registry.definitions()
    dispatcher = ToolDispatcher(
        registry,
        clock=clock,
        policy=params.permissions,
        can_use_tool=params.can_use_tool,
        default_timeout_s=config.tool_timeout_s,
    )
    caller, close_caller = _resolve_caller(deps)
    state = initial_state(run.initial_messages, clock.now())
    turn: _Turn | None = None
    try:
        while True:
            turn = None
            stop = check_guardrails(state, config, clock.now())
            if stop is not None:
                run.settle(stop, state)
                return
            state = await _prepare_history(state, deps, config)
            max_tokens = state.max_output_tokens_override or config.max_tokens
            request = build_request(
                state.messages,
                config,
                system=params.system,
                tools=tool_definitions,
                max_tokens=max_tokens,
                request_id=deps.uuid(),
            )
            turn = _Turn(
                number=state.turn_count + 1,
                accumulator=TurnAccumulator(),
                executor=StreamingToolExecutor(
                    dispatcher,
                    turn=state.turn_count + 1,
                    clock=clock,
                    max_concurrency=config.max_tool_concurrency,
                ),
            )
            async with aclosing(_guarded(caller, request)) as stream:
                async for item in stream:
                    if isinstance(item, StatusEvent):
                        yield item
                        continue
                    tool_use = turn.accumulator.feed(item)
                    if config.stream_events:
                        yield StreamEvent(turn.number, item)
                    if tool_use is not None:
                        turn.executor.submit(tool_use)
                    for tool_event in turn.executor.drain():
                        yield tool_event
                    if item.get("type") == "error":
                        break
            outcome = turn.outcome = turn.accumulator.outcome()
            state = record_response(state, outcome)
            decision = decide(state, outcome, config)
            if not isinstance(decision, Transition):
                await turn.executor.cancel()
                before = len(state.messages)
                state = conclude(state, decision, outcome)
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
                state = advance(state, decision, outcome, turn.executor.results())
                turn.settled = True
                yield ToolResults(turn.number, state.messages[-1])
            else:
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
        if turn is not None:
            await turn.executor.cancel()
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
        return AbortedTools(turn=turn.number, interrupted_tool_use_ids=unfinished), final
    return AbortedStreaming(turn=turn.number), final


def _appended(number: int, state: LoopState, before: int, outcome: TurnOutcome) -> list[LoopEvent]:
    """Events for the messages the last step appended to the history."""
    events: list[LoopEvent] = []
    for message in state.messages[before:]:
        if message.get("role") == "assistant":
            events.append(AssistantMessage(number, message, outcome.stop_reason, outcome.usage))
        elif any(b.get("type") == "tool_result" for b in message.get("content") or [] if isinstance(b, dict)):
            events.append(ToolResults(number, message))
    return events


async def _prepare_history(state: LoopState, deps: LoopDeps, config: LoopConfig) -> LoopState:
    """Microcompact, compact, then restore the pairing invariant: what the request will send."""
    compacted = await deps.compact(await deps.microcompact(state.messages, config), config)
    normalized = tuple(normalize(compacted))
    if compacted is not state.messages:  # the history was rewritten: the reported size no longer applies
        return replace(state, messages=normalized, context_tokens=0, context_message_count=0)
    if len(normalized) != len(state.messages) or any(
        a is not b for a, b in zip(normalized, state.messages, strict=True)
    ):
        return replace(state, messages=normalized)
    return state


def _resolve_caller(deps: LoopDeps) -> tuple[ModelCaller, Callable[[], Awaitable[None]] | None]:
    """The injected caller, or the environment's provider (then owned, so closed, by the run)."""
    if deps.call_model is not None:
        return deps.call_model, None
    from loop.callers.provider import ProviderModelCaller

    caller = ProviderModelCaller.from_environ(os.environ)
    return caller, caller.aclose


async def _guarded(caller: ModelCaller, request: ModelRequest) -> AsyncGenerator[ModelStreamItem, None]:
    """The caller's stream, closed when we stop; an exception it raises becomes an ``error``
    event (``client_error``), so a failing caller ends the run as ``model_error``."""
    stream = caller(request)
    try:
        async for item in stream:
            yield item
    except Exception as exc:
        log.exception("model caller failed (request %s)", request.request_id)
        yield error_event("client_error", f"{type(exc).__name__}: {exc}")
    finally:
        close = getattr(stream, "aclose", None)
        if close is not None:
            await close()
