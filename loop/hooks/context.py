"""What a Python hook callback is given besides its input (claude-agent-sdk's ``context``)."""

from __future__ import annotations

from dataclasses import dataclass

from loop.deps import Clock


@dataclass(frozen=True, slots=True)
class HookContext:
    session_id: str
    event: str
    cwd: str
    clock: Clock
