"""The run-level hook events and what their answers do to the run.

Events and effects follow Claude Code's (``SessionStart``, ``UserPromptSubmit``, ``Stop``,
``PreCompact``, ``SessionEnd``, and the sub-agent variants); a switchyard run, one ``query()``
call, is the hooks' session.

Details: docs/internals/loop-hooks.md
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from typing import Any

from loop.config import LoopConfig
from loop.deps import ModelCaller, ModelStreamItem
from loop.hooks.runner import HookRunner
from loop.hooks.settings import HookEvent
from loop.messages import Message, blocks_of
from loop.outcome import TurnOutcome
from loop.request import ModelRequest
from loop.state import LoopState
from loop.stop_hooks import StopHook, StopHookResult
from loop.transitions import HookStopped

log = logging.getLogger("switchyard.loop")


async def begin(
    runner: HookRunner, messages: tuple[Message, ...]
) -> tuple[tuple[Message, ...], HookStopped | None]:
    """The history the run starts with (hook context added), or why a hook stopped it."""
    runner.note_history(messages)
    contexts: list[str] = []
    child = runner.child_of
    if child is not None:
        if runner.has(HookEvent.SUBAGENT_START):
            started = await runner.run(HookEvent.SUBAGENT_START, {}, subject=child.agent_type)
            if started.additional_context:
                contexts.append(started.additional_context)
    elif runner.has(HookEvent.SESSION_START):
        started = await runner.run(HookEvent.SESSION_START, {"source": "startup"}, subject="startup")
        if started.stop:
            return messages, HookStopped(
                HookEvent.SESSION_START.value, started.stop_reason or "stopped by a hook"
            )
        if started.additional_context:
            contexts.append(started.additional_context)
    prompt = _prompt(messages) if child is None else None
    if prompt is not None and runner.has(HookEvent.USER_PROMPT_SUBMIT):
        submitted = await runner.run(HookEvent.USER_PROMPT_SUBMIT, {"prompt": prompt})
        if submitted.stop or submitted.blocked:
            message = submitted.stop_reason if submitted.stop else submitted.reason
            return messages, HookStopped(
                HookEvent.USER_PROMPT_SUBMIT.value, message or "the prompt was blocked by a hook"
            )
        if submitted.additional_context:
            contexts.append(submitted.additional_context)
    if not contexts:
        return messages, None
    blocks = [{"type": "text", "text": f"<hook-context>\n{text}\n</hook-context>"} for text in contexts]
    if messages and messages[-1].get("role") == "user":
        last = messages[-1]
        return (*messages[:-1], {**last, "content": [*blocks_of(last), *blocks]}), None
    return (*messages, {"role": "user", "content": blocks}), None


async def stop_answers(
    hooks: Sequence[StopHook],
    runner: HookRunner | None,
    state: LoopState,
    outcome: TurnOutcome,
    config: LoopConfig,
) -> list[StopHookResult]:
    """Every stop hook's answer to a completed turn: the Python ``StopHook``s in order (one that
    raises is logged and ignored), then the settings' ``Stop`` hooks."""
    history = (*state.messages, outcome.assistant_message())
    results: list[StopHookResult] = []
    for hook in hooks:
        try:
            results.append(await hook(history))
        except Exception:
            log.exception("stop hook %r failed; ignored", hook)
    if runner is not None:
        active = state.stop_hook_active
        results.append(
            await stop_hooks(
                runner, state.messages, outcome, stop_hook_active=active, subagent=config.subagent
            )
        )
    return results


async def stop_hooks(
    runner: HookRunner,
    history: Sequence[Message],
    outcome: TurnOutcome,
    *,
    stop_hook_active: bool,
    subagent: bool,
) -> StopHookResult:
    """The ``Stop`` (or ``SubagentStop``) hooks' answer to a completed turn."""
    event = HookEvent.SUBAGENT_STOP if subagent else HookEvent.STOP
    if not runner.has(event):
        return StopHookResult()
    runner.note_history((*history, outcome.assistant_message()))
    last = "\n".join(str(b.get("text", "")) for b in outcome.content if b.get("type") == "text")
    subject = runner.child_of.agent_type if runner.child_of is not None else None
    answer = await runner.run(
        event, {"stop_hook_active": stop_hook_active, "last_assistant_message": last}, subject=subject
    )
    if answer.stop:
        return StopHookResult(
            prevent_continuation=True, message=answer.stop_reason or f"a {event.value} hook ended the run"
        )
    if answer.blocked:
        return StopHookResult(blocking_errors=(answer.reason,))
    return StopHookResult()


def charge(state: LoopState, runner: HookRunner | None) -> LoopState:
    """The state with what the hooks' judges were billed added to the run's usage."""
    if runner is None:
        return state
    spent = runner.take_usage()
    return replace(state, usage=state.usage + spent) if spent.total else state


async def end(runner: HookRunner, history: Sequence[Message]) -> None:
    try:
        if runner.child_of is None and runner.has(HookEvent.SESSION_END):
            runner.note_history(history)
            await runner.run(HookEvent.SESSION_END, {"reason": "other"})
    finally:
        runner.close()


class PreCompactCaller:
    """The run's model caller, raising ``PreCompact`` before each summarisation call."""

    def __init__(self, inner: ModelCaller, runner: HookRunner) -> None:
        self._inner = inner
        self._runner = runner
        self.provider: Any = getattr(inner, "provider", None)
        """What the loop reads of the caller's upstream (its ``name``)."""

    async def __call__(self, request: ModelRequest) -> AsyncIterator[ModelStreamItem]:
        if request.source == "compact":
            await self._runner.run(
                HookEvent.PRE_COMPACT, {"trigger": "auto", "custom_instructions": ""}, subject="auto"
            )
        stream = self._inner(request)
        try:
            async for item in stream:
                yield item
        finally:
            close = getattr(stream, "aclose", None)
            if close is not None:
                await close()


def _prompt(messages: tuple[Message, ...]) -> str | None:
    """The text of the user's prompt the run starts on (``None``: the run resumes tool work)."""
    if not messages or messages[-1].get("role") != "user":
        return None
    texts = [str(b.get("text", "")) for b in blocks_of(messages[-1]) if b.get("type") == "text"]
    return "\n".join(texts) if any(t.strip() for t in texts) else None
