"""Hooks: stop hooks and lifecycle hooks configured in Claude Code's ``hooks`` settings shape.

Load them with :func:`load_hooks` or build a :class:`HookSettings` in code (examples in the
design document).

Public: ``__all__``; the modules inside are internal (the design document describes the formats).

Details: docs/internals/loop-hooks.md
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
