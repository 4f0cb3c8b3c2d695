"""``PreToolUse`` and ``PostToolUse`` around the dispatcher's permission check and execution.

``PreToolUse`` runs after input validation and before the permission check; an ``allow`` never
overrides deny rules or plan mode, and ``updatedInput`` is validated again.

Details: docs/internals/loop-hooks.md
"""

from __future__ import annotations

from typing import Any

import orjson
from pydantic import ValidationError

from loop.hooks.output import HookOutput
from loop.hooks.runner import HookRunner
from loop.hooks.settings import HookEvent
from loop.messages import Block, tool_result_block
from loop.outcome import ToolUse
from loop.tools.content import checked_blocks
from loop.tools.dispatcher import PreparedCall, ToolDispatcher
from loop.tools.permissions import (
    PermissionCallback,
    PermissionPolicy,
    PermissionRequest,
    PermissionVerdict,
    evaluate,
)
from loop.tools.registry import ToolRegistry


class HookedDispatcher(ToolDispatcher):
    def __init__(
        self,
        registry: ToolRegistry,
        *,
        runner: HookRunner,
        policy: PermissionPolicy | None = None,
        can_use_tool: PermissionCallback | None = None,
        **options: Any,
    ) -> None:
        base = policy or PermissionPolicy()
        self._runner = runner
        self._base_policy = base
        self._user = can_use_tool
        self._approved: set[str] = set()
        """Calls a ``PreToolUse`` hook allowed: whoever the policy would ask says yes."""
        classifier = self._asker(base.classifier) if base.classifier is not None else None
        approving = PermissionPolicy(base.mode, base.allow, base.deny, classifier, self._asker(base.parent))
        super().__init__(registry, policy=approving, can_use_tool=self._asker(can_use_tool), **options)

    def _asker(self, callback: PermissionCallback | None) -> PermissionCallback:
        async def ask(request: PermissionRequest) -> PermissionVerdict:
            if request.tool_use_id in self._approved:
                return PermissionVerdict(True, "allowed by a PreToolUse hook")
            if callback is None:
                _, reason = evaluate(self._base_policy, request)
                return PermissionVerdict(False, f"{reason}: confirmation required and nobody can be asked")
            return await callback(request)

        return ask

    async def run(self, call: PreparedCall, turn: int) -> Block:
        tool_use = call.tool_use
        if self._runner.has(HookEvent.PRE_TOOL_USE):
            gated = await self._pre(call)
            if not isinstance(gated, PreparedCall):
                return gated
            call = gated
        try:
            block = await super().run(call, turn)
        finally:
            self._approved.discard(tool_use.id)
        if self._runner.has(HookEvent.POST_TOOL_USE) and block.get("is_error") is not True:
            block = await self._post(call, block)
        return block

    async def _pre(self, call: PreparedCall) -> PreparedCall | Block:
        tool_use, name = call.tool_use, call.tool.name
        answer = await self._runner.run(
            HookEvent.PRE_TOOL_USE,
            {"tool_name": name, "tool_input": tool_use.input or {}, "tool_use_id": tool_use.id},
            subject=name,
            tool_use_id=tool_use.id,
        )
        if answer.stop:
            self._request_stop(HookEvent.PRE_TOOL_USE, answer)
            return _refused(tool_use, f"The {name} call was not run: a PreToolUse hook stopped the run.")
        if answer.blocked or answer.permission == "deny":
            reason = answer.permission_reason if answer.permission == "deny" else answer.reason
            return _refused(
                tool_use, f"A PreToolUse hook denied the {name} call: {reason or 'no reason given'}"
            )
        if answer.updated_input is not None:
            try:
                validated = call.tool.input_model.model_validate(answer.updated_input)
            except ValidationError as exc:
                problems = "; ".join(e["msg"] for e in exc.errors(include_url=False))
                return _refused(tool_use, f"A PreToolUse hook rewrote the {name} input invalidly: {problems}")
            call = PreparedCall(
                ToolUse(tool_use.id, tool_use.name, answer.updated_input), call.tool, validated
            )
        if answer.permission == "allow":
            self._approved.add(tool_use.id)
        elif answer.permission == "ask":
            verdict = await self._confirm(call, answer.permission_reason)
            if not verdict.allowed:
                return _refused(
                    tool_use, f"Permission denied ({verdict.message}): the {name} call was cancelled."
                )
            self._approved.add(tool_use.id)
        return call

    async def _confirm(self, call: PreparedCall, reason: str) -> PermissionVerdict:
        if self._user is None:
            return PermissionVerdict(
                False, f"a PreToolUse hook asked for confirmation{_because(reason)} and nobody can be asked"
            )
        try:
            paths = call.tool.input_paths(call.tool_input)
        except Exception:
            paths = ()
        tool = call.tool
        request = PermissionRequest(
            tool.name,
            dict(call.tool_use.input or {}),
            call.tool_use.id,
            tool.read_only,
            tool.destructive,
            paths,
        )
        return await self._user(request)

    async def _post(self, call: PreparedCall, block: Block) -> Block:
        tool_use, name = call.tool_use, call.tool.name
        answer = await self._runner.run(
            HookEvent.POST_TOOL_USE,
            {
                "tool_name": name,
                "tool_input": tool_use.input or {},
                "tool_response": block.get("content"),
                "tool_use_id": tool_use.id,
            },
            subject=name,
            tool_use_id=tool_use.id,
        )
        if answer.stop:
            self._request_stop(HookEvent.POST_TOOL_USE, answer)
        content = block.get("content")
        if answer.updated_output is not None:
            replaced = answer.updated_output
            if isinstance(replaced, list):  # blocks from a hook are checked as a tool's are
                content = checked_blocks(replaced)
            else:
                content = replaced if isinstance(replaced, str) else orjson.dumps(replaced).decode()
        notes = [
            text for text in (answer.reason if answer.blocked else "", answer.additional_context) if text
        ]
        if notes:
            feedback = "PostToolUse hook feedback:\n" + "\n".join(notes)
            content = _appended(content, feedback)
        return {**block, "content": content}

    def _request_stop(self, event: HookEvent, answer: HookOutput) -> None:
        if self._runner.stop_requested is None:
            self._runner.stop_requested = (
                event.value,
                answer.stop_reason or f"stopped by a {event.value} hook",
            )


def _appended(content: Any, text: str) -> Any:
    if isinstance(content, list):
        return [*content, {"type": "text", "text": text}]
    return f"{content}\n\n{text}" if content else text


def _refused(tool_use: ToolUse, text: str) -> Block:
    return tool_result_block(tool_use.id, text, is_error=True)


def _because(reason: str) -> str:
    return f" ({reason})" if reason else ""
