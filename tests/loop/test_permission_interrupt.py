"""A denial that asks to stop the run (``PermissionVerdict.interrupt``) ends it with
``PermissionDenied`` once the turn's results are in; an ordinary denial lets the model go on."""

from __future__ import annotations

import loop
from loop.testing import FakeModel, FakeResponse, FakeTool, VirtualClock, text, tool_use
from loop.tools import PermissionMode, PermissionPolicy, PermissionRequest, PermissionVerdict
from loop.transitions import Completed, NextTurn, PermissionDenied
from tests.loop.support import pairing_violations


def _run(interrupt: bool) -> tuple[loop.Run, FakeModel, FakeTool, FakeTool]:
    reader = FakeTool("read_file", result="data", read_only=True)
    writer = FakeTool("write_file", result="written", read_only=False, destructive=True)

    async def refuse(request: PermissionRequest) -> PermissionVerdict:
        return PermissionVerdict(False, "nobody to ask", interrupt=interrupt)

    clock = VirtualClock()
    model = FakeModel(
        [
            FakeResponse.of(
                tool_use("read_file", {"path": "a"}, id="toolu_r"),
                tool_use("write_file", {"path": "a"}, id="toolu_w"),
            ),
            FakeResponse.of(text("I could not write it.")),
        ],
        clock=clock,
    )
    params = loop.QueryParams(
        "copy a",
        tools=[reader, writer],
        deps=loop.LoopDeps(call_model=model, clock=clock),
        permissions=PermissionPolicy(mode=PermissionMode.ACCEPT_EDITS),
        can_use_tool=refuse,
    )
    return loop.query(params), model, reader, writer


async def test_an_interrupting_denial_ends_the_run_after_the_turn() -> None:
    run, model, reader, writer = _run(interrupt=True)
    terminal = await run.wait()
    assert terminal == PermissionDenied("write_file", "toolu_w", "nobody to ask")
    assert len(model.requests) == 1 and len(reader.calls) == 1 and writer.calls == []
    results = {b["tool_use_id"]: b for b in run.messages[-1]["content"]}
    assert results["toolu_r"]["content"] == "data"
    assert results["toolu_w"]["is_error"] is True and "nobody to ask" in results["toolu_w"]["content"]
    assert run.state.transitions == (NextTurn(2),)
    assert pairing_violations(run.messages) == []


async def test_an_ordinary_denial_lets_the_model_go_on() -> None:
    run, model, _, writer = _run(interrupt=False)
    assert await run.wait() == Completed("end_turn")
    assert len(model.requests) == 2 and writer.calls == []
