"""The single security boundary between the model's tool calls and the tools.

Lookup, validation, permission, execution under a timeout, wrapping: whatever happens the caller
gets exactly one ``tool_result`` for the call; error messages carry no file names or absolute
paths; only cancellation (and ``KeyboardInterrupt``) propagates.

Details: docs/internals/loop-tools.md
"""

from __future__ import annotations

import errno
import logging
import re
from dataclasses import dataclass
from typing import Any

import orjson
from pydantic import BaseModel, ValidationError

from loop.deps import Clock
from loop.messages import Block, tool_result_block
from loop.outcome import ToolUse
from loop.tools.base import Tool, ToolContext, ToolError
from loop.tools.content import ToolResultContent, to_content
from loop.tools.permissions import PermissionCallback, PermissionPolicy, PermissionRequest, resolve
from loop.tools.registry import ToolRegistry

log = logging.getLogger("switchyard.loop.tools")


@dataclass(frozen=True, slots=True)
class PreparedCall:
    """A call whose tool exists and whose input validated."""

    tool_use: ToolUse
    tool: Tool[Any]
    tool_input: BaseModel


def truncate_content(content: ToolResultContent, limit: int | None) -> ToolResultContent:
    """``truncate`` for text, or for each text block of a list of blocks."""
    if isinstance(content, str):
        return truncate(content, limit)
    return [{**b, "text": truncate(str(b["text"]), limit)} if b.get("type") == "text" else b for b in content]


def truncate(text: str, limit: int | None) -> str:
    if limit is None or len(text) <= limit:
        return text
    omitted = len(text) - limit
    return (
        text[:limit] + f"\n\n[Result truncated: {omitted} of {len(text)} characters omitted "
        f"(limit {limit}). Narrow the request to see the rest.]"
    )


@dataclass(frozen=True, slots=True)
class Interruption:
    """A denied call whose verdict asked to end the run (a headless run refusing a destructive
    tool): the loop ends with ``PermissionDenied`` once the turn's results are in."""

    tool_use_id: str
    tool_name: str
    message: str


class ToolDispatcher:
    def __init__(
        self,
        registry: ToolRegistry,
        *,
        clock: Clock,
        policy: PermissionPolicy | None = None,
        can_use_tool: PermissionCallback | None = None,
        default_timeout_s: float = 120.0,
        truncate_results: bool = True,
        tool_deps: object = None,
    ) -> None:
        self._registry = registry
        self._clock = clock
        self._policy = policy or PermissionPolicy()
        self._can_use_tool = can_use_tool
        self._default_timeout_s = default_timeout_s
        self._truncate_results = truncate_results
        self._tool_deps = tool_deps
        self.interruptions: list[Interruption] = []
        """Denials that asked to stop the run (``PermissionVerdict.interrupt``), in order."""

    def prepare(self, tool_use: ToolUse) -> PreparedCall | Block:
        """The validated call, or the error result that answers it. Never raises."""
        try:
            return self._prepare(tool_use)
        except Exception as exc:
            _log_failure("input validation", tool_use, exc)
            return _error(tool_use, f"Invalid input for tool {tool_use.name!r}: {describe_exception(exc)}")

    def _prepare(self, tool_use: ToolUse) -> PreparedCall | Block:
        tool = self._registry.get(tool_use.name)
        if tool is None:
            available = ", ".join(self._registry.names) or "(none)"
            return _error(tool_use, f"Unknown tool {tool_use.name!r}. Available tools: {available}.")
        if tool_use.input is None:
            return _error(tool_use, f"Invalid input for tool {tool.name!r}: {tool_use.input_error}.")
        try:
            tool_input = tool.input_model.model_validate(tool_use.input)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '(input)'}: {e['msg']}"
                for e in exc.errors(include_url=False)
            )
            schema = orjson.dumps(tool.input_schema()).decode()
            return _error(
                tool_use,
                f"Invalid input for tool {tool.name!r}: {problems}. Expected input schema: {schema}",
            )
        return PreparedCall(tool_use, tool, tool_input)

    def is_concurrency_safe(self, call: PreparedCall) -> bool:
        try:
            return bool(call.tool.is_concurrency_safe(call.tool_input))
        except Exception as exc:
            _log_failure("is_concurrency_safe (the call is treated as unsafe)", call.tool_use, exc)
            return False

    async def run(self, call: PreparedCall, turn: int) -> Block:
        """Permission, execution, wrapping. Never raises except ``CancelledError``."""
        try:
            return await self._run(call, turn)
        except Exception as exc:  # a bug outside the tool's call (the permission layer...)
            _log_failure("dispatch", call.tool_use, exc)
            return _error(call.tool_use, f"Tool {call.tool.name!r} failed: {describe_exception(exc)}")

    async def _run(self, call: PreparedCall, turn: int) -> Block:
        tool, tool_use = call.tool, call.tool_use
        try:
            paths = tool.input_paths(call.tool_input)
        except ToolError as exc:
            return _error(tool_use, str(exc))
        except Exception as exc:
            _log_failure("input_paths", tool_use, exc)
            return _error(tool_use, f"Tool {tool.name!r} failed: {describe_exception(exc)}")
        request = PermissionRequest(
            tool_name=tool.name,
            tool_input=dict(tool_use.input or {}),
            tool_use_id=tool_use.id,
            read_only=tool.read_only,
            destructive=tool.destructive,
            paths=paths,
        )
        try:
            verdict = await resolve(self._policy, request, self._can_use_tool)
        except Exception as exc:
            _log_failure("the permission check", tool_use, exc)
            reason = f"the permission check failed: {describe_exception(exc)}"
            return _error(tool_use, f"Permission denied ({reason}): the {tool.name} call was cancelled.")
        if not verdict.allowed:
            reason = verdict.message or "permission denied"
            if verdict.interrupt:
                self.interruptions.append(Interruption(tool_use.id, tool.name, reason))
            return _error(tool_use, f"Permission denied ({reason}): the {tool.name} call was cancelled.")
        timeout_s = tool.timeout_s if tool.timeout_s is not None else self._default_timeout_s
        context: ToolContext = ToolContext(
            tool_use_id=tool_use.id, turn=turn, clock=self._clock, timeout_s=timeout_s, deps=self._tool_deps
        )
        try:
            async with self._clock.timeout(timeout_s):
                result = await _capture(tool, call.tool_input, context)
        except TimeoutError:  # only the clock's: the tool's own exceptions are captured inside
            return _error(tool_use, f"Tool {tool.name!r} timed out after {timeout_s:g}s.")
        if isinstance(result, ToolError):
            return _error(tool_use, truncate(str(result), tool.max_result_size_chars))
        if isinstance(result, BaseException):
            _log_failure("call", tool_use, result)
            return _error(tool_use, f"Tool {tool.name!r} failed: {describe_exception(result)}")
        if self._truncate_results:
            result = truncate_content(result, tool.max_result_size_chars)
        return tool_result_block(tool_use.id, result)

    async def dispatch(self, tool_use: ToolUse, turn: int) -> Block:
        prepared = self.prepare(tool_use)
        if not isinstance(prepared, PreparedCall):
            return prepared
        return await self.run(prepared, turn)


async def _capture(
    tool: Tool[Any], tool_input: BaseModel, context: ToolContext
) -> ToolResultContent | Exception | SystemExit:
    """The tool's result (text or content blocks, see ``loop.tools.content``) or the exception it
    raised (cancellation and ``KeyboardInterrupt`` still propagate; ``SystemExit``, from a tool
    that calls ``sys.exit`` or argparse, does not)."""
    try:
        return to_content(await tool.call(tool_input, context))
    except (Exception, SystemExit) as exc:
        return exc


MAX_EXCEPTION_CHARS = 500
_ABSOLUTE_PATH = re.compile(r"(?:(?<=^)|(?<=[\s'\"(=\[]))/[^\s'\"]*")


def describe_exception(exc: BaseException) -> str:
    """``Type: message`` for a tool's result: an ``OSError`` with an errno by that errno and its
    ``strerror`` (never its file names),
    anything else with absolute paths replaced by ``<path>``, at most ``MAX_EXCEPTION_CHARS``."""
    name = type(exc).__name__
    if isinstance(exc, OSError) and exc.errno is not None:  # its filenames stay out
        code = errno.errorcode.get(exc.errno, str(exc.errno))
        return f"{name}: [{code}] {exc.strerror or 'operating system error'}"
    try:
        text = str(exc)
    except Exception:  # a broken __str__ must not break the answer
        text = ""
    text = _ABSOLUTE_PATH.sub("<path>", text)
    if len(text) > MAX_EXCEPTION_CHARS:
        text = text[:MAX_EXCEPTION_CHARS] + "..."
    return f"{name}: {text}" if text else name


def _log_failure(stage: str, tool_use: ToolUse, exc: BaseException) -> None:
    log.error(
        "tool %s failed in %s (tool_use_id=%s): %s",
        tool_use.name, stage, tool_use.id, describe_exception(exc),
    )  # fmt: skip
    log.debug("tool %s failure traceback (tool_use_id=%s)", tool_use.name, tool_use.id, exc_info=exc)


def _error(tool_use: ToolUse, text: str) -> Block:
    return tool_result_block(tool_use.id, text, is_error=True)
