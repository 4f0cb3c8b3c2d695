"""Model-judged hooks: ``prompt`` (one call to a small model, the fast path) and ``agent`` (a nested
agent run with read-only tools).

Both use the run's own model caller; a judge that fails, times out or answers something else is
a non-blocking error. The agent judge is a plain nested ``query()``, not a sub-agent.

Details: docs/internals/loop-hooks.md
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from contextlib import aclosing
from typing import TYPE_CHECKING, Any

import orjson

from loop.calls import guarded
from loop.config import LoopConfig
from loop.cost import Pricing
from loop.deps import Clock, LoopDeps, ModelCaller
from loop.events import StatusEvent
from loop.hooks.output import HookOutput, cut, from_json
from loop.hooks.settings import AgentHook, PromptHook
from loop.messages import blocks_of, user_message
from loop.request import ModelRequest
from loop.tools.base import Tool
from loop.usage import TokenUsage

if TYPE_CHECKING:
    from loop.params import QueryFunction

Spend = Callable[[TokenUsage], None]
"""Told what a judge's model calls were billed (the run's token guardrail counts them)."""

JUDGE_MODEL = "claude-haiku-4-5"
"""The small model a judge uses when its hook names none."""
JUDGE_MAX_TOKENS = 1_024
JUDGE_SYSTEM = (
    "You are a hook in an agent's run: you check one event against the condition the user wrote. "
    'Reply with one JSON object and nothing else: {"ok": true} when the condition is met, or '
    '{"ok": false, "reason": "<what is wrong, addressed to the agent>"} when it is not.'
)
AGENT_JUDGE_SYSTEM = (
    JUDGE_SYSTEM + " You may use the read-only tools to look at the workspace before you answer."
)
_OBJECT = re.compile(r"\{.*\}", re.DOTALL)


def judge_prompt(prompt: str, data: dict[str, Any]) -> str:
    arguments = orjson.dumps(data).decode()
    if "$ARGUMENTS" in prompt:
        return prompt.replace("$ARGUMENTS", arguments)
    return f"{prompt}\n\nHook input:\n{arguments}"


async def run_prompt_judge(
    hook: PromptHook,
    data: dict[str, Any],
    *,
    caller: ModelCaller,
    clock: Clock,
    request_id: str,
    timeout_s: float,
    spend: Spend,
    pricing: Pricing,
) -> HookOutput:
    body = {
        "model": hook.model or JUDGE_MODEL,
        "max_tokens": JUDGE_MAX_TOKENS,
        "system": [{"type": "text", "text": JUDGE_SYSTEM}],
        "messages": [user_message(judge_prompt(hook.prompt, data))],
        "stream": True,
    }
    request = ModelRequest(body=body, betas=(), request_id=request_id, source="hook")
    accumulator = pricing.accumulator(request)
    try:
        async with clock.timeout(timeout_s), aclosing(guarded(caller, request)) as stream:
            async for item in stream:
                if isinstance(item, StatusEvent):
                    continue
                accumulator.feed(item)
                if item.get("type") == "error":
                    break
    except TimeoutError:
        spend(accumulator.outcome().usage)
        return HookOutput(error=f"the prompt hook timed out after {timeout_s:g}s")
    except BaseException:  # the run was aborted meanwhile: what the stream reported was billed
        spend(accumulator.outcome().usage)
        raise
    outcome = accumulator.outcome()
    spend(outcome.usage)
    if outcome.error is not None:
        return HookOutput(error=f"the prompt hook's model call failed: {outcome.error.error_type}")
    text = "".join(str(b.get("text", "")) for b in outcome.content if b.get("type") == "text")
    return verdict(text)


async def run_agent_judge(
    hook: AgentHook,
    data: dict[str, Any],
    *,
    caller: ModelCaller,
    clock: Clock,
    tools: Sequence[Tool[Any]],
    model: str,
    timeout_s: float,
    spend: Spend,
    run_query: QueryFunction,
    pricing: Pricing,
) -> HookOutput:
    """``run_query``: ``loop.query.query`` (the judge is a run of the loop itself)."""
    from loop.params import QueryParams  # not at import: loop.params imports what imports this
    from loop.tools.permissions import PermissionMode, PermissionPolicy
    from loop.transitions import Completed

    config = LoopConfig(
        model=hook.model or model,
        max_turns=hook.max_turns,
        max_wall_clock_s=None,
        subagent=True,
        source="agent:hook-judge",
    )
    run = run_query(
        QueryParams(
            messages=judge_prompt(hook.prompt, data),
            system=AGENT_JUDGE_SYSTEM,
            tools=[tool for tool in tools if tool.read_only],
            config=config,
            deps=LoopDeps(call_model=caller, clock=clock, prices=pricing.table),
            permissions=PermissionPolicy(mode=PermissionMode.PLAN),
        )
    )
    try:
        async with clock.timeout(timeout_s), run:
            await run.wait()
    except TimeoutError:
        if run.finished:
            spend(run.state.usage)
        return HookOutput(error=f"the agent hook timed out after {timeout_s:g}s")
    except BaseException:  # the run was aborted meanwhile: the judge's calls were billed
        if run.finished:
            spend(run.state.usage)
        raise
    spend(run.state.usage)
    if not isinstance(run.terminal, Completed):
        return HookOutput(error=f"the agent hook's run ended with {run.terminal.reason}")
    last = run.messages[-1]
    return verdict("".join(str(b.get("text", "")) for b in blocks_of(last) if b.get("type") == "text"))


def verdict(text: str) -> HookOutput:
    """The judge's answer as a hook answer."""
    match = _OBJECT.search(text)
    if match is None:
        return HookOutput(error="the judge did not answer with a JSON object")
    try:
        answer = orjson.loads(match.group(0))
    except orjson.JSONDecodeError:
        return HookOutput(error="the judge's answer is not valid JSON")
    if not isinstance(answer, dict):
        return HookOutput(error="the judge's answer is not a JSON object")
    if "ok" in answer:
        if answer["ok"] is True:
            return HookOutput()
        reason = answer.get("reason")
        return HookOutput(
            blocked=True, reason=cut(reason) if isinstance(reason, str) and reason else "the judge said no"
        )
    return from_json(answer)
