"""Hooks: stop hooks and lifecycle hooks configured in Claude Code's ``hooks`` settings shape.

::

    from loop.hooks import load_hooks
    params = loop.QueryParams("fix the tests", tools=tools, hooks=load_hooks(".claude/settings.json"))

or, in code, with claude-agent-sdk style callbacks::

    async def no_rm(input_data, tool_use_id, context):
        if "rm -rf" in input_data["tool_input"].get("command", ""):
            return {"hookSpecificOutput": {"hookEventName": "PreToolUse",
                    "permissionDecision": "deny", "permissionDecisionReason": "no rm -rf"}}
        return {}

    hooks = HookSettings.of({"PreToolUse": [HookMatcher("bash", (PythonHook(no_rm),))]})

See :mod:`loop.hooks.settings` (the file format), :mod:`loop.hooks.output` (what a hook answers),
:mod:`loop.hooks.lifecycle` and :mod:`loop.hooks.tools` (what the answers do).

Public: ``__all__``; the modules inside are internal (their docstrings document the formats).
"""

from loop.hooks.context import HookContext
from loop.hooks.output import HookOutput
from loop.hooks.runner import HookRunner
from loop.hooks.settings import (
    AgentHook,
    CommandHook,
    Hook,
    HookEvent,
    HookMatcher,
    HookSettings,
    HttpHook,
    PromptHook,
    PythonHook,
    load_hooks,
)

__all__ = [
    "AgentHook",
    "CommandHook",
    "Hook",
    "HookContext",
    "HookEvent",
    "HookMatcher",
    "HookOutput",
    "HookRunner",
    "HookSettings",
    "HttpHook",
    "PromptHook",
    "PythonHook",
    "load_hooks",
]
