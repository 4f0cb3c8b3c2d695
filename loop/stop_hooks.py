"""Stop hooks: checks run when the model ends its turn without calling a tool.

A hook sees the final history and answers with blocking errors (appended as a user message; the
model goes on, transition ``stop_hook_blocking``) or a request to stop (``stop_hook_prevented``).
Hooks never run after an API error or a response the loop gave up on — only after ``end_turn`` /
``stop_sequence``: "error -> hook blocks -> retry -> error" would feed more tokens into a prompt
that already does not fit, every cycle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from loop.messages import Message, user_message


@dataclass(frozen=True, slots=True)
class StopHookResult:
    blocking_errors: tuple[str, ...] = ()
    prevent_continuation: bool = False
    message: str = ""


class StopHook(Protocol):
    async def __call__(self, messages: tuple[Message, ...]) -> StopHookResult: ...


def blocking_message(errors: tuple[str, ...]) -> Message:
    lines = "\n".join(f"- {error}" for error in errors)
    return user_message(f"Stop hook feedback: fix these before finishing.\n{lines}")
