"""Permission modes and rules: may this tool call run?

``evaluate`` is pure and decides ALLOW, DENY or ASK; ``resolve`` asks. A matching deny rule
refuses in every mode, and an ASK with nobody to ask is a denial (the mode table: the design
document).

Details: docs/internals/loop-tools.md
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

log = logging.getLogger("switchyard.loop.permissions")


class PermissionMode(enum.StrEnum):
    BYPASS_PERMISSIONS = "bypassPermissions"
    DONT_ASK = "dontAsk"
    AUTO = "auto"
    ACCEPT_EDITS = "acceptEdits"
    DEFAULT = "default"
    PLAN = "plan"
    BUBBLE = "bubble"


@dataclass(frozen=True, slots=True)
class PermissionRule:
    tool: str | None = None
    path_prefix: str | None = None

    def __post_init__(self) -> None:
        if self.tool is None and self.path_prefix is None:
            raise ValueError("a permission rule needs a tool name, a path prefix, or both")

    def matches(self, tool_name: str, paths: tuple[str, ...], *, any_path: bool) -> bool:
        if self.tool is not None and self.tool != tool_name:
            return False
        if self.path_prefix is None:
            return True
        if not paths:
            return False
        under = (_is_under(path, self.path_prefix) for path in paths)
        return any(under) if any_path else all(under)


def _is_under(path: str, prefix: str) -> bool:
    parts = PurePosixPath(path.strip("/") or ".").parts
    prefix_parts = PurePosixPath(prefix.strip("/") or ".").parts
    if prefix_parts == (".",):
        return True
    return parts[: len(prefix_parts)] == prefix_parts


@dataclass(frozen=True, slots=True)
class PermissionRequest:
    tool_name: str
    tool_input: dict[str, Any]
    tool_use_id: str
    read_only: bool
    destructive: bool
    paths: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PermissionVerdict:
    allowed: bool
    message: str = ""
    interrupt: bool = False
    """With ``allowed=False``: end the run after this turn (terminal ``permission_denied``)
    instead of letting the model carry on without the call (a headless run's refusal)."""


PermissionCallback = Callable[[PermissionRequest], Awaitable[PermissionVerdict]]


class Decision(enum.Enum):
    ALLOW = "allow"
    DENY = "deny"
    ASK_USER = "ask_user"
    ASK_CLASSIFIER = "ask_classifier"
    ASK_PARENT = "ask_parent"


@dataclass(frozen=True, slots=True)
class PermissionPolicy:
    mode: PermissionMode = PermissionMode.DEFAULT
    allow: tuple[PermissionRule, ...] = ()
    deny: tuple[PermissionRule, ...] = ()
    classifier: PermissionCallback | None = None
    """``auto`` mode's judge (a light model call, a heuristic...)."""
    parent: PermissionCallback | None = None
    """``bubble`` mode: the parent agent's callback."""


def evaluate(policy: PermissionPolicy, request: PermissionRequest) -> tuple[Decision, str]:
    """The decision for ``request`` and the reason, without asking anyone."""
    name, paths = request.tool_name, request.paths
    for rule in policy.deny:
        if rule.matches(name, paths, any_path=True):
            return Decision.DENY, f"denied by rule {_describe(rule)}"
    mode = policy.mode
    if mode is PermissionMode.PLAN:
        if request.read_only:
            return Decision.ALLOW, "read-only tool in plan mode"
        return Decision.DENY, "plan mode allows read-only tools only"
    if mode is PermissionMode.BYPASS_PERMISSIONS:
        return Decision.ALLOW, "bypassPermissions"
    for rule in policy.allow:
        if rule.matches(name, paths, any_path=False):
            return Decision.ALLOW, f"allowed by rule {_describe(rule)}"
    if request.read_only:
        return Decision.ALLOW, "read-only tool"
    if mode is PermissionMode.DONT_ASK:
        return Decision.ALLOW, "dontAsk mode"
    if mode is PermissionMode.ACCEPT_EDITS and not request.destructive:
        return Decision.ALLOW, "acceptEdits mode allows edits"
    if mode is PermissionMode.AUTO and policy.classifier is not None:
        return Decision.ASK_CLASSIFIER, "auto mode"
    if mode is PermissionMode.BUBBLE:
        return Decision.ASK_PARENT, "bubble mode"
    return Decision.ASK_USER, "destructive tool" if request.destructive else "tool changes the workspace"


async def resolve(
    policy: PermissionPolicy, request: PermissionRequest, can_use_tool: PermissionCallback | None
) -> PermissionVerdict:
    """Evaluate, then ask whoever the decision names. Nobody to ask means no."""
    decision, reason = evaluate(policy, request)
    if decision is Decision.ALLOW:
        if policy.mode is PermissionMode.DONT_ASK and reason == "dontAsk mode":
            log.info("dontAsk: allowed %s (%s) without asking", request.tool_name, request.tool_use_id)
        return PermissionVerdict(True, reason)
    if decision is Decision.DENY:
        return PermissionVerdict(False, reason)
    ask = {
        Decision.ASK_USER: can_use_tool,
        Decision.ASK_CLASSIFIER: policy.classifier,
        Decision.ASK_PARENT: policy.parent,
    }[decision]
    if ask is None:
        return PermissionVerdict(False, f"{reason}: confirmation required and nobody can be asked")
    return await ask(request)


def _describe(rule: PermissionRule) -> str:
    parts = [f"tool={rule.tool}"] if rule.tool else []
    if rule.path_prefix is not None:
        parts.append(f"path={rule.path_prefix}")
    return "(" + ", ".join(parts) + ")"
