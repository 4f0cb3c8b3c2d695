"""``HookRunner``: raises one run's hook events, with Claude Code's hook input.

Inputs follow the Claude Code hooks reference ("Hook input"); matching hooks run concurrently and
their answers are merged. A sub-agent's runner is made from its parent's.

Details: docs/internals/loop-hooks.md
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import tempfile
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from loop.cost import Pricing
from loop.deps import Clock, ModelCaller
from loop.hooks.child import ChildHooks
from loop.hooks.context import HookContext
from loop.hooks.handlers import run_command, run_http, run_python
from loop.hooks.judges import run_agent_judge, run_prompt_judge
from loop.hooks.output import HookOutput, merge
from loop.hooks.settings import (
    DEFAULT_TIMEOUT_S,
    AgentHook,
    CommandHook,
    Hook,
    HookEvent,
    HookSettings,
    HttpHook,
    PromptHook,
    PythonHook,
)
from loop.messages import Message
from loop.tools.base import Tool
from loop.usage import TokenUsage

if TYPE_CHECKING:
    from loop.params import QueryFunction

log = logging.getLogger("switchyard.loop.hooks")


class HookRunner:
    def __init__(
        self,
        settings: HookSettings,
        *,
        caller: ModelCaller,
        clock: Clock,
        model: str | Callable[[], str],
        permission_mode: str,
        tools: Sequence[Tool[Any]] = (),
        session_id: str | None = None,
        run_query: QueryFunction | None = None,
        pricing: Pricing | None = None,
        child_of: ChildHooks | None = None,
    ) -> None:
        self.settings = settings
        self.pricing = pricing or Pricing()
        """How the judges' model calls are priced."""
        self.session_id = session_id or str(uuid.uuid4())
        self.cwd = settings.cwd or str(Path.cwd())
        self._caller = caller
        self._clock = clock
        self._model = model
        """The run's model (a callable: the model now, its fallback model after a sticky
        fallback): an agent judge's default."""
        self._permission_mode = permission_mode
        self._tools = tuple(tools)
        self._run_query = run_query  # ``loop.query.query``, for agent judges
        self._history: Sequence[Message] = ()
        self._written: tuple[int, int] | None = None
        self._directory: str | None = None
        self._usage = TokenUsage()
        self.child_of = child_of
        """Set in a sub-agent's run: its parent's runner and its identity."""
        self.stop_requested: tuple[str, str] | None = None
        """``(event, message)`` once a tool hook answered ``continue: false``: the loop ends the run
        with ``hook_stopped`` when the turn's tools are done."""

    def _current_model(self) -> str:
        return self._model() if callable(self._model) else self._model

    def has(self, event: HookEvent) -> bool:
        return self.settings.has(event)

    def spend(self, usage: TokenUsage) -> None:
        self._usage = self._usage + usage

    def take_usage(self) -> TokenUsage:
        """What the judges' model calls were billed since the last call (then reset)."""
        usage, self._usage = self._usage, TokenUsage()
        return usage

    def note_history(self, messages: Sequence[Message]) -> None:
        """The history the next hooks' transcript shows."""
        self._history = messages

    async def run(
        self,
        event: HookEvent,
        fields: Mapping[str, Any],
        *,
        subject: str | None = None,
        tool_use_id: str | None = None,
    ) -> HookOutput:
        hooks = self.settings.hooks_for(event, subject)
        if not hooks:
            return HookOutput()
        needs_transcript = _needs_transcript(hooks)
        data: dict[str, Any] = {
            "session_id": self.session_id,
            "transcript_path": self._session_transcript(needs_transcript),
            "cwd": self.cwd,
            "permission_mode": self._permission_mode,
            "hook_event_name": event.value,
        }
        child = self.child_of
        if child is not None:
            data["agent_id"], data["agent_type"] = child.agent_id, child.agent_type
            if event is HookEvent.SUBAGENT_STOP:
                data["agent_transcript_path"] = (
                    self._transcript() if needs_transcript else self._transcript_path()
                )
        data.update(fields)
        outputs = await asyncio.gather(*(self._one(hook, event, data, tool_use_id) for hook in hooks))
        for hook, output in zip(hooks, outputs, strict=True):
            if output.error:
                log.warning("%s hook %s: %s (ignored)", event.value, _describe(hook), output.error)
            if output.system_message:
                log.info("%s hook %s: %s", event.value, _describe(hook), output.system_message)
        return merge(outputs)

    async def _one(
        self, hook: Hook, event: HookEvent, data: dict[str, Any], tool_use_id: str | None
    ) -> HookOutput:
        timeout_s = hook.timeout_s or DEFAULT_TIMEOUT_S
        try:
            match hook:
                case CommandHook():
                    return await run_command(hook, orjson.dumps(data), cwd=self.cwd, timeout_s=timeout_s)
                case HttpHook():
                    return await run_http(
                        hook, orjson.dumps(data), environ=self.settings.environ, timeout_s=timeout_s
                    )
                case PythonHook():
                    context = HookContext(self.session_id, event.value, self.cwd, self._clock)
                    return await run_python(hook, data, tool_use_id, context, timeout_s=timeout_s)
                case PromptHook():
                    request_id = f"req_hook_{uuid.uuid4().hex}"
                    return await run_prompt_judge(
                        hook,
                        data,
                        caller=self._caller,
                        clock=self._clock,
                        request_id=request_id,
                        timeout_s=timeout_s,
                        spend=self.spend,
                        pricing=self.pricing,
                    )
                case AgentHook():
                    if self._run_query is None:
                        return HookOutput(
                            error="an agent hook needs the runner's run_query (loop.query.query)"
                        )
                    return await run_agent_judge(
                        hook, data, caller=self._caller, clock=self._clock, tools=self._tools,
                        model=self._current_model(), timeout_s=timeout_s, spend=self.spend,
                        run_query=self._run_query, pricing=self.pricing,
                    )  # fmt: skip
        except Exception as exc:  # a bug in a handler must not end the run
            log.exception("%s hook %s failed", event.value, _describe(hook))
            return HookOutput(error=f"{type(exc).__name__}")

    def _session_transcript(self, write: bool) -> str:
        """The session's transcript (the top-level run's history, in a sub-agent's run too)."""
        if self.child_of is not None:
            return self.child_of.parent._session_transcript(write)
        return self._transcript() if write else self._transcript_path()

    def _transcript_path(self) -> str:
        if self._directory is None:
            self._directory = tempfile.mkdtemp(prefix="switchyard-hooks-")
        name = self.session_id if self.child_of is None else f"agent-{self.child_of.agent_id}"
        return str(Path(self._directory) / f"{name}.jsonl")

    def _transcript(self) -> str:
        path = self._transcript_path()
        key = (id(self._history), len(self._history))
        if key != self._written:
            lines = (
                orjson.dumps(
                    {"type": m.get("role"), "sessionId": self.session_id, "cwd": self.cwd, "message": m}
                )
                for m in self._history
            )
            Path(path).write_bytes(b"".join(line + b"\n" for line in lines))
            self._written = key
        return path

    def close(self) -> None:
        """Remove the transcript file (called when the run ends)."""
        if self._directory is not None:
            shutil.rmtree(self._directory, ignore_errors=True)
            self._directory = None


def _needs_transcript(hooks: Sequence[Hook]) -> bool:
    return any(isinstance(h, CommandHook | HttpHook | PythonHook) for h in hooks)


def _describe(hook: Hook) -> str:
    match hook:
        case CommandHook(command=command):
            return f"command {command[:80]!r}"
        case HttpHook():
            return "webhook"  # the URL may carry credentials: never logged
        case PythonHook(function=function):
            return f"function {getattr(function, '__qualname__', repr(function))}"
        case PromptHook():
            return "prompt judge"
        case AgentHook():
            return "agent judge"
