"""What one hook answered, read the way Claude Code reads it, and the answers of several merged.

Exit codes and the JSON answer are read as the Claude Code hooks reference ("Hook output")
describes; a non-blocking error is logged and the run goes on.

Details: docs/internals/loop-hooks.md
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import orjson

Permission = Literal["allow", "deny", "ask"]
MAX_MESSAGE_CHARS = 10_000
"""Longer stderr / reasons are cut (a hook's message goes into the model's context)."""
_PERMISSION_RANK: dict[str, int] = {"deny": 3, "ask": 2, "allow": 1}


@dataclass(frozen=True, slots=True)
class HookOutput:
    blocked: bool = False
    """Exit code 2, or ``decision: "block"`` (``reason`` says why)."""
    reason: str = ""
    stop: bool = False
    """``continue: false``: the run stops (``stop_reason`` says why)."""
    stop_reason: str = ""
    permission: Permission | None = None
    permission_reason: str = ""
    updated_input: dict[str, Any] | None = None
    additional_context: str = ""
    updated_output: Any = None
    system_message: str = ""
    error: str = ""
    """A non-blocking failure (other exit codes, a timeout, an unreadable answer): logged."""


def cut(text: str) -> str:
    text = text.strip()
    return text if len(text) <= MAX_MESSAGE_CHARS else text[:MAX_MESSAGE_CHARS] + "... [cut]"


def from_json(data: Any) -> HookOutput:
    """The structured answer (``HookOutput(error=...)`` when it is not a JSON object)."""
    if data is None:
        return HookOutput()
    if not isinstance(data, Mapping):
        return HookOutput(error=f"the hook's JSON answer is a {type(data).__name__}, not an object")
    specific = data.get("hookSpecificOutput")
    specific = specific if isinstance(specific, Mapping) else {}
    decision = data.get("decision")
    reason = _string(data.get("reason"))
    permission: Permission | None = None
    stated = specific.get("permissionDecision")
    if stated in ("allow", "deny", "ask"):
        permission = stated
    elif decision == "approve":
        permission = "allow"
    elif decision == "block":
        permission = "deny"
    updated_input = specific.get("updatedInput")
    return HookOutput(
        blocked=decision == "block",
        reason=cut(reason),
        stop=data.get("continue") is False,
        stop_reason=cut(_string(data.get("stopReason"))),
        permission=permission,
        permission_reason=cut(_string(specific.get("permissionDecisionReason")) or reason),
        updated_input=dict(updated_input) if isinstance(updated_input, Mapping) else None,
        additional_context=cut(_string(specific.get("additionalContext"))),
        updated_output=specific.get("updatedMCPToolOutput"),
        system_message=cut(_string(data.get("systemMessage"))),
    )


def from_stdout(stdout: str) -> HookOutput:
    """Exit code 0 (or a 2xx body): a JSON object is the answer, other text is context."""
    text = stdout.strip()
    if not text:
        return HookOutput()
    if text.startswith("{"):
        try:
            return from_json(orjson.loads(text))
        except orjson.JSONDecodeError as exc:
            return HookOutput(error=f"the hook printed invalid JSON: {exc}")
    return HookOutput(additional_context=cut(text))


def merge(outputs: Sequence[HookOutput]) -> HookOutput:
    """Several hooks' answers to one event: any block or stop wins, reasons are joined, the
    strictest permission wins (deny > ask > allow), the last input or output replacement wins."""
    if len(outputs) == 1:
        return outputs[0]
    permissions = [o for o in outputs if o.permission is not None]
    strictest = max(permissions, key=lambda o: _PERMISSION_RANK[o.permission or "allow"], default=None)
    stops = [o for o in outputs if o.stop]
    return HookOutput(
        blocked=any(o.blocked for o in outputs),
        reason=_join(o.reason for o in outputs if o.blocked),
        stop=bool(stops),
        stop_reason=stops[0].stop_reason if stops else "",
        permission=strictest.permission if strictest is not None else None,
        permission_reason=_join(
            o.permission_reason for o in permissions if strictest and o.permission == strictest.permission
        ),
        updated_input=next((o.updated_input for o in reversed(outputs) if o.updated_input is not None), None),
        additional_context=_join(o.additional_context for o in outputs),
        updated_output=next(
            (o.updated_output for o in reversed(outputs) if o.updated_output is not None), None
        ),
        system_message=_join(o.system_message for o in outputs),
        error=_join(o.error for o in outputs),
    )


def _string(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _join(parts: Any) -> str:
    return "\n".join(p for p in parts if p)
