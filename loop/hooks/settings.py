"""Hook settings in Claude Code's ``hooks`` shape, so existing settings files and scripts work.

Unknown events are accepted and ignored with a warning (files load as they are); an unknown
handler type is an error, since silently skipping a guard is not safe.

Details: docs/internals/loop-hooks.md
"""

from __future__ import annotations

import enum
import importlib
import logging
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from loop.hooks.context import HookContext

log = logging.getLogger("switchyard.loop.hooks")

DEFAULT_TIMEOUT_S = 60.0
"""A handler without ``timeout`` gets this many seconds (Claude Code's default for commands)."""
DEFAULT_JUDGE_MAX_TURNS = 10


class HookEvent(enum.StrEnum):
    PRE_TOOL_USE = "PreToolUse"
    POST_TOOL_USE = "PostToolUse"
    USER_PROMPT_SUBMIT = "UserPromptSubmit"
    STOP = "Stop"
    SUBAGENT_START = "SubagentStart"
    """Before a sub-agent's first model call (matcher: the agent type; cannot block)."""
    SUBAGENT_STOP = "SubagentStop"
    """Instead of ``Stop`` in a sub-agent's run (``LoopConfig.subagent``; matcher: the agent
    type)."""
    SESSION_START = "SessionStart"
    SESSION_END = "SessionEnd"
    PRE_COMPACT = "PreCompact"


HookCallback = Callable[[dict[str, Any], str | None, HookContext], Awaitable[Mapping[str, Any] | None]]


@dataclass(frozen=True, slots=True)
class CommandHook:
    """A shell command: the hook input as JSON on stdin; exit 0 passes (stdout may be a JSON
    answer), exit 2 blocks with stderr as the reason, anything else is a logged, non-blocking
    error."""

    command: str
    timeout_s: float | None = None


@dataclass(frozen=True, slots=True)
class HttpHook:
    """``POST`` the hook input as JSON; a 2xx answer's JSON body is read like a command's stdout;
    any other status, a connection failure or a timeout is a non-blocking error. ``$NAME`` /
    ``${NAME}`` in a header value is replaced from the environment for names in
    ``allowed_env_vars`` only."""

    url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    allowed_env_vars: tuple[str, ...] = ()
    timeout_s: float | None = None


@dataclass(frozen=True, slots=True)
class PythonHook:
    function: HookCallback
    timeout_s: float | None = None


@dataclass(frozen=True, slots=True)
class PromptHook:
    """One call to a small model through the loop's model caller: ``prompt`` (``$ARGUMENTS`` is
    replaced by the hook input JSON, appended when absent); the model answers
    ``{"ok": true}`` or ``{"ok": false, "reason": "..."}``."""

    prompt: str
    model: str | None = None
    timeout_s: float | None = None


@dataclass(frozen=True, slots=True)
class AgentHook:
    """Like ``PromptHook``, but a nested agent run with the loop's read-only tools and up to
    ``max_turns`` model calls, so it can look at the files before it answers."""

    prompt: str
    model: str | None = None
    timeout_s: float | None = None
    max_turns: int = DEFAULT_JUDGE_MAX_TURNS


Hook = CommandHook | HttpHook | PythonHook | PromptHook | AgentHook
_EXACT = re.compile(r"[A-Za-z0-9_|]+")


@dataclass(frozen=True, slots=True)
class HookMatcher:
    matcher: str | None
    hooks: tuple[Hook, ...]

    def __post_init__(self) -> None:
        if self.matcher and not _EXACT.fullmatch(self.matcher) and self.matcher != "*":
            try:
                re.compile(self.matcher)
            except re.error as exc:
                raise ValueError(
                    f"hook matcher {self.matcher!r} is not a valid regular expression: {exc}"
                ) from exc

    def matches(self, subject: str | None) -> bool:
        pattern = self.matcher
        if not pattern or pattern == "*" or subject is None:
            return True
        if _EXACT.fullmatch(pattern):
            return subject in pattern.split("|")
        return re.search(pattern, subject) is not None


@dataclass(frozen=True, slots=True)
class HookSettings:
    events: Mapping[HookEvent, tuple[HookMatcher, ...]]
    cwd: str | None = None
    """The hooks' working directory (``cwd`` in their input, ``CLAUDE_PROJECT_DIR``); ``None``:
    the process's."""
    environ: Mapping[str, str] = field(default_factory=dict)
    """Where webhook headers' ``$NAME`` references are looked up (``allowedEnvVars`` only)."""

    def hooks_for(self, event: HookEvent, subject: str | None = None) -> list[Hook]:
        return [hook for m in self.events.get(event, ()) if m.matches(subject) for hook in m.hooks]

    def has(self, event: HookEvent) -> bool:
        return any(m.hooks for m in self.events.get(event, ()))

    @classmethod
    def of(
        cls, events: Mapping[str, Sequence[HookMatcher]], *, cwd: str | Path | None = None
    ) -> HookSettings:
        """Settings built in code: ``HookSettings.of({"PreToolUse": [HookMatcher("bash", (hook,))]})``."""
        return cls({HookEvent(name): tuple(matchers) for name, matchers in events.items()},
                   str(cwd) if cwd is not None else None)  # fmt: skip

    @classmethod
    def from_json(
        cls, data: Any, *, cwd: str | Path | None = None, environ: Mapping[str, str] | None = None
    ) -> HookSettings:
        """Parse a settings object (``{"hooks": {...}}``, or the ``hooks`` object itself)."""
        if isinstance(data, dict) and "hooks" in data:
            data = data["hooks"]
        if not isinstance(data, dict):
            raise ValueError('hook settings must be an object: {"hooks": {"<Event>": [...]}}')
        events: dict[HookEvent, tuple[HookMatcher, ...]] = {}
        known = {e.value for e in HookEvent}
        for name, matchers in data.items():
            if name not in known:
                log.warning("hook event %r is not raised by switchyard's loop; its hooks are ignored", name)
                continue
            if not isinstance(matchers, list):
                raise ValueError(f"hooks.{name} must be a list of matcher groups")
            events[HookEvent(name)] = tuple(_matcher(f"hooks.{name}[{i}]", m) for i, m in enumerate(matchers))
        return cls(events, str(cwd) if cwd is not None else None, dict(environ or {}))


def load_hooks(
    path: str | Path, *, cwd: str | Path | None = None, environ: Mapping[str, str] | None = None
) -> HookSettings:
    """Read a settings file (``ValueError`` says what is wrong with it, and where)."""
    try:
        data = orjson.loads(Path(path).read_bytes())
    except OSError as exc:
        raise ValueError(f"cannot read hook settings {path}: {exc.strerror or exc}") from exc
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"hook settings {path} are not valid JSON: {exc}") from exc
    return HookSettings.from_json(data, cwd=cwd, environ=environ)


def _matcher(where: str, group: Any) -> HookMatcher:
    if not isinstance(group, dict):
        raise ValueError(f"{where} must be an object with a hooks list")
    matcher = group.get("matcher")
    if matcher is not None and not isinstance(matcher, str):
        raise ValueError(f"{where}.matcher must be a string")
    handlers = group.get("hooks")
    if not isinstance(handlers, list):
        raise ValueError(f"{where}.hooks must be a list")
    return HookMatcher(matcher, tuple(_hook(f"{where}.hooks[{i}]", h) for i, h in enumerate(handlers)))


def _hook(where: str, spec: Any) -> Hook:
    if not isinstance(spec, dict):
        raise ValueError(f"{where} must be an object")
    timeout = spec.get("timeout")
    if timeout is not None and (
        not isinstance(timeout, int | float) or isinstance(timeout, bool) or timeout <= 0
    ):
        raise ValueError(f"{where}.timeout must be a positive number of seconds")
    timeout_s = float(timeout) if timeout is not None else None
    kind = spec.get("type")
    if kind == "command":
        return CommandHook(_text(where, spec, "command"), timeout_s)
    if kind == "http":
        headers = spec.get("headers") or {}
        allowed = spec.get("allowedEnvVars") or []
        if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
            raise ValueError(f"{where}.headers must map names to strings")
        if not isinstance(allowed, list) or not all(isinstance(v, str) for v in allowed):
            raise ValueError(f"{where}.allowedEnvVars must be a list of names")
        return HttpHook(_text(where, spec, "url"), dict(headers), tuple(allowed), timeout_s)
    if kind in ("prompt", "agent"):
        model = spec.get("model")
        if model is not None and not isinstance(model, str):
            raise ValueError(f"{where}.model must be a string")
        prompt = _text(where, spec, "prompt")
        return (
            PromptHook(prompt, model, timeout_s) if kind == "prompt" else AgentHook(prompt, model, timeout_s)
        )
    if kind == "python":
        return PythonHook(_import(where, _text(where, spec, "callable")), timeout_s)
    raise ValueError(f"{where}.type {kind!r} is not one of command, http, prompt, agent, python")


def _text(where: str, spec: Mapping[str, Any], key: str) -> str:
    value = spec.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where}.{key} must be a non-empty string")
    return value


def _import(where: str, reference: str) -> HookCallback:
    module_name, _, attribute = reference.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"{where}.callable must be 'module:function', got {reference!r}")
    try:
        target: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"{where}.callable {reference!r} cannot be imported: {exc}") from exc
    if not callable(target):
        raise ValueError(f"{where}.callable {reference!r} is not callable")
    function: HookCallback = target
    return function
