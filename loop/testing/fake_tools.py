"""``FakeTool``: a configurable tool that records its calls and can take (virtual) time."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from loop.tools.base import Tool, ToolContext


class AnyInput(BaseModel):
    """Accepts any JSON object."""

    model_config = ConfigDict(extra="allow")


@dataclass(frozen=True, slots=True)
class FakeToolCall:
    tool_use_id: str
    input: dict[str, Any]
    started_at: float
    finished_at: float


class FakeTool(Tool[BaseModel]):
    """Returns ``result`` (a string, or a function of the input) after ``duration_s`` on the
    context's clock, or raises ``error``. ``concurrency_safe`` defaults to ``read_only``."""

    def __init__(
        self,
        name: str,
        *,
        result: str | Callable[[dict[str, Any]], str] = "ok",
        input_model: type[BaseModel] = AnyInput,
        read_only: bool = True,
        destructive: bool = False,
        concurrency_safe: bool | None = None,
        duration_s: float = 0.0,
        error: Exception | None = None,
        max_result_size_chars: int | None = 50_000,
        timeout_s: float | None = None,
        description: str = "A fake tool for tests.",
    ) -> None:
        self.name = name
        self.description = description
        self.input_model = input_model
        self.read_only = read_only
        self.destructive = destructive
        self.max_result_size_chars = max_result_size_chars
        self.timeout_s = timeout_s
        self._result = result
        self._concurrency_safe = read_only if concurrency_safe is None else concurrency_safe
        self._duration_s = duration_s
        self._error = error
        self.calls: list[FakeToolCall] = []
        self.started: list[float] = []

    def is_concurrency_safe(self, tool_input: BaseModel) -> bool:
        return self._concurrency_safe

    async def call(self, tool_input: BaseModel, context: ToolContext) -> str:
        started = context.clock.now()
        self.started.append(started)
        payload = tool_input.model_dump()
        if self._duration_s > 0:
            await context.clock.sleep(self._duration_s)
        self.calls.append(FakeToolCall(context.tool_use_id, payload, started, context.clock.now()))
        if self._error is not None:
            raise self._error
        return self._result(payload) if callable(self._result) else self._result
