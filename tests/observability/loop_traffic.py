"""Agent-loop runs for the dashboards test: real ``loop.query`` runs on the scripted ``FakeModel``,
counted by ``LoopMetrics`` into the gateway's registry (one ``/metrics``, as when the loop runs in
the gateway's process), so the "Agent loop" row of the reliability dashboard has data.

Each round: a run whose history is past the auto-compact threshold (a summary, then the answer),
a run with the same history whose upstream refuses every prompt as too long (a summary, then
reactive compaction, then ``prompt_too_long``), and a tool loop stopped by ``max_turns`` (a
breaker trip).
"""

from __future__ import annotations

from typing import Any

import loop
from gateway.loop_metrics import LoopMetrics
from loop.request import ModelRequest
from loop.testing import FakeModel, FakeResponse, FakeTool, VirtualClock, text, tool_use

SMALL = {"context_window": 60_000, "max_tokens": 4_000, "escalated_max_tokens": 8_000}


def _history() -> list[dict[str, Any]]:
    """~43,000 estimated tokens of earlier conversation: past auto-compact (39,000), under blocking."""
    messages: list[dict[str, Any]] = []
    for i in range(5):
        messages.append({"role": "user", "content": [{"type": "text", "text": f"q{i} " + "q" * 13_000}]})
        messages.append({"role": "assistant", "content": [{"type": "text", "text": f"a{i} " + "a" * 13_000}]})
    messages.append({"role": "user", "content": [{"type": "text", "text": "now fix the bug"}]})
    return messages


def _answer(main: FakeResponse) -> Any:
    def answer(request: ModelRequest) -> FakeResponse:
        if request.source == "compact":
            return FakeResponse.of(text("Summary: the bug is in parse()."))
        return main

    return answer


async def loop_traffic(metrics: LoopMetrics) -> list[loop.Terminal]:
    """Three runs observed by ``metrics``; their terminals."""
    too_long = FakeResponse.http_error(
        400, "invalid_request_error", "prompt is too long: 70000 tokens > 60000 maximum"
    )
    runs = [
        (_history(), FakeModel([], then=_answer(FakeResponse.of(text("fixed")))), [], SMALL),
        (_history(), FakeModel([], then=_answer(too_long)), [], SMALL),
        (
            "keep reading",
            FakeModel([], then=FakeResponse.of(tool_use("read", {"path": "a"}))),
            [FakeTool("read")],
            {"max_turns": 2},
        ),
    ]
    terminals: list[loop.Terminal] = []
    for messages, model, tools, config in runs:
        run = loop.query(
            loop.QueryParams(
                messages,
                tools=tools,
                config=loop.LoopConfig(**config),
                deps=loop.LoopDeps(call_model=model, clock=VirtualClock()),
                observers=[metrics],
            )
        )
        terminals.append(await run.wait())
    return terminals
