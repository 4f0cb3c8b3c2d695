"""The pairing invariant across a parent and its children (hypothesis).

The parent starts one to three children in one response (several concurrently); each child has a
random script (text, thinking, safe / state-changing / crashing / unknown / invalid tool calls,
over several turns, possibly a mid-stream overload). Then something breaks: nothing, the parent
is closed after any event, or one child is killed when it starts running. Every request any
conversation sent, the parent's final history and every child's must satisfy the invariant, and
no child or tool task may outlive the parent.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import loop
from loop.events import TaskState, TaskUpdate
from loop.testing import FakeResponse, VirtualClock, text
from loop.tools import PermissionMode, PermissionPolicy
from tests.loop.subagent_support import agent_call, live_tasks, subagent_run
from tests.loop.support import pairing_violations
from tests.loop.test_pairing_properties import SCRIPTS, tools


@dataclass(frozen=True)
class Break:
    kind: str  # none | aclose | kill
    at: int = 0  # event index (aclose), child index (kill)


BREAKS = st.one_of(
    st.just(Break("none")),
    st.builds(Break, st.just("aclose"), st.integers(0, 60)),
    st.builds(Break, st.just("kill"), st.integers(0, 2)),
)
CHILD = st.tuples(SCRIPTS, st.one_of(st.none(), st.integers(0, 40)))


async def scenario(children: list[tuple[list[FakeResponse], int | None]], broken: Break) -> None:
    clock = VirtualClock()
    prompts = [f"child {n}" for n in range(len(children))]
    scripts = {
        prompt: [replace(script[0], fail_after=fail), *script[1:]] if fail is not None else script
        for prompt, (script, fail) in zip(prompts, children, strict=True)
    }
    run, model = subagent_run(
        [FakeResponse.of(*(agent_call(p) for p in prompts)), FakeResponse.of(text("all done"))],
        scripts,
        child_tools=tools(),
        clock=clock,
        permissions=PermissionPolicy(mode=PermissionMode.BYPASS_PERMISSIONS),
        max_consecutive_errors=None,
        max_repeated_tool_calls=None,
        max_turns=50,
    )
    handles: dict[str, object] = {}
    count = 0
    async for event in run:
        count += 1
        if isinstance(event, TaskUpdate):
            handles[event.task_id] = event.handle
            if (
                broken.kind == "kill"
                and event.state is TaskState.RUNNING
                and event.task_id == f"agent_{broken.at + 1}"
            ):
                event.handle.kill()
        if broken.kind == "aclose" and count > broken.at:
            await run.aclose()
            break
    await asyncio.sleep(0)
    assert run.finished
    assert pairing_violations(run.messages) == []
    for body in model.bodies:
        assert pairing_violations(body["messages"]) == []
    for handle in handles.values():
        child = handle.run  # type: ignore[attr-defined]
        assert handle.state.final  # type: ignore[attr-defined]
        if child is not None:
            assert child.finished
            assert pairing_violations(child.messages) == []
    assert live_tasks() == []
    if broken.kind != "aclose":
        assert isinstance(run.terminal, loop.Completed)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(children=st.lists(CHILD, min_size=1, max_size=3), broken=BREAKS)
def test_pairing_holds_across_parent_and_children(
    children: list[tuple[list[FakeResponse], int | None]], broken: Break
) -> None:
    asyncio.run(scenario(children, broken))
