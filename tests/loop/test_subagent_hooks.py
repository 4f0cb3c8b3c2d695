"""The parent's hooks reach its sub-agents, as in Claude Code: a Claude-Code-style shell script
(JSON on stdin, exit 2 blocks) refuses a child's tool call through ``PreToolUse``; ``SubagentStart``
adds context to the child's prompt (matched on the agent type); ``SubagentStop`` sees the child's
answer and keeps it working once; hook inputs inside a child carry ``agent_id`` / ``agent_type``,
and the session events are the parent's alone."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import loop
from loop.events import TaskUpdate, ToolFinished
from loop.hooks import load_hooks
from loop.subagents import AgentDefinition, SubagentConfig
from loop.testing import FakeModel, FakeResponse, FakeTool, VirtualClock, text, tool_use
from loop.tools import PermissionMode, PermissionPolicy
from loop.transitions import Completed, NextTurn, StopHookBlocking
from tests.loop.subagent_support import PARENT, Routed, agent_call
from tests.loop.support import of_type, pairing_violations, run_to_end

GUARD = r"""#!/bin/sh
input=$(cat)
printf '%s\n' "$input" >> "$CLAUDE_PROJECT_DIR/hooks.log"
event=$(printf '%s' "$input" | python3 -c 'import json, sys; print(json.load(sys.stdin)["hook_event_name"])')
case "$event" in
  PreToolUse)
    tool=$(printf '%s' "$input" | sed -n 's/.*"tool_name": *"\([^"]*\)".*/\1/p')
    echo "Policy: $tool may not modify files in this repository." >&2
    exit 2
    ;;
  SubagentStart)
    echo '{"hookSpecificOutput": {"hookEventName": "SubagentStart", "additionalContext": "The repository is read-only today."}}'
    ;;
  SubagentStop)
    printf '%s' "$input" | python3 -c '
import json, sys
data = json.load(sys.stdin)
lines = lambda p: sum(1 for _ in open(p))
with open(data["cwd"] + "/transcripts.log", "a") as out:
    out.write(json.dumps([lines(data["transcript_path"]), lines(data["agent_transcript_path"])]) + "\n")
'
    active=$(printf '%s' "$input" | sed -n 's/.*"stop_hook_active": *\(true\|false\).*/\1/p')
    if [ "$active" = "true" ]; then exit 0; fi
    echo "Before stopping, list what you changed." >&2
    exit 2
    ;;
esac
exit 0
"""
BLOCKED = "Policy: edit may not modify files in this repository."
STOP_FEEDBACK = "Before stopping, list what you changed."


def _settings(tmp_path: Path) -> Path:
    guard = tmp_path / "guard.sh"
    guard.write_text(GUARD)
    guard.chmod(0o755)
    command = [{"type": "command", "command": str(guard), "timeout": 20}]
    other = [{"type": "command", "command": "echo 'Reviewers must be strict.'"}]
    settings = {
        "hooks": {
            "PreToolUse": [{"matcher": "edit", "hooks": command}],
            "SubagentStart": [
                {"matcher": "worker", "hooks": command},
                {"matcher": "reviewer", "hooks": other},
            ],
            "SubagentStop": [{"matcher": "worker", "hooks": command}],
            "Stop": [{"hooks": command}],
            "SessionStart": [{"hooks": command}],
            "UserPromptSubmit": [{"hooks": command}],
            "SessionEnd": [{"hooks": command}],
        }
    }
    path = tmp_path / "settings.json"
    path.write_text(json.dumps(settings))
    return path


def _texts(message: dict[str, Any]) -> str:
    return " ".join(str(b.get("text") or b.get("content") or "") for b in message["content"])


async def test_the_parents_hook_script_blocks_a_childs_tool_call_and_keeps_it_working(tmp_path: Path) -> None:
    workspace = tmp_path / "repo"
    workspace.mkdir()
    clock = VirtualClock()
    edit = FakeTool("edit", read_only=False, result="edited")  # allowed by acceptEdits: only the hook refuses
    child = FakeModel(
        [
            FakeResponse.of(tool_use("edit", {"path": "a.py"})),
            FakeResponse.of(text("I could not edit a.py.")),
            FakeResponse.of(text("I changed nothing.")),
        ],
        clock=clock,
    )
    parent = FakeModel(
        [FakeResponse.of(agent_call("fix the bug")), FakeResponse.of(text("The worker changed nothing."))],
        clock=clock,
    )
    params = loop.QueryParams(
        messages=PARENT,
        deps=loop.LoopDeps(call_model=Routed({PARENT: parent, "fix the bug": child}), clock=clock),
        permissions=PermissionPolicy(mode=PermissionMode.ACCEPT_EDITS),
        hooks=load_hooks(_settings(tmp_path), cwd=workspace),
        subagents=SubagentConfig(agents=[AgentDefinition("worker", "Fixes bugs.", tools=[edit])]),
    )
    run = loop.query(params)
    events = await run_to_end(run)
    assert run.terminal == Completed("end_turn")
    assert edit.calls == []

    # the child's tool result is the script's refusal; its stop was blocked once
    child_run = of_type(events, TaskUpdate)[-1].handle.run  # type: ignore[attr-defined]
    assert child_run.state.transitions == (NextTurn(1), StopHookBlocking((STOP_FEEDBACK,)))
    refused = child.requests[1].body["messages"][-1]["content"][0]
    assert refused["is_error"] is True
    assert refused["content"] == f"A PreToolUse hook denied the edit call: {BLOCKED}"
    assert STOP_FEEDBACK in _texts(child.requests[2].body["messages"][-1])
    # SubagentStart's context went into the child's prompt (the "reviewer" group did not match)
    prompt = _texts(child.requests[0].body["messages"][0])
    assert "<hook-context>\nThe repository is read-only today.\n</hook-context>" in prompt
    assert "Reviewers must be strict" not in prompt
    (answer,) = [e.result for e in of_type(events, ToolFinished) if e.name == "agent"]
    assert answer["content"] == "I changed nothing."
    assert pairing_violations(run.messages) == [] and pairing_violations(child_run.messages) == []

    inputs = [json.loads(line) for line in (workspace / "hooks.log").read_text().splitlines()]
    seen = [(i["hook_event_name"], i.get("agent_id"), i.get("agent_type")) for i in inputs]
    assert seen == [
        ("SessionStart", None, None),
        ("UserPromptSubmit", None, None),
        ("SubagentStart", "agent_1", "worker"),
        ("PreToolUse", "agent_1", "worker"),
        ("SubagentStop", "agent_1", "worker"),
        ("SubagentStop", "agent_1", "worker"),
        ("Stop", None, None),
        ("SessionEnd", None, None),
    ]
    assert len({i["session_id"] for i in inputs}) == 1  # one session: the parent's
    stops = [i for i in inputs if i["hook_event_name"] == "SubagentStop"]
    assert [(s["stop_hook_active"], s["last_assistant_message"]) for s in stops] == [
        (False, "I could not edit a.py."),
        (True, "I changed nothing."),
    ]
    assert inputs[3]["tool_name"] == "edit" and inputs[3]["tool_input"] == {"path": "a.py"}
    # transcript_path: the parent's history as its last request sent it (the prompt: 1 line);
    # agent_transcript_path: the child's own (prompt, call, refusal, answer; + feedback, answer)
    sizes = [json.loads(line) for line in (workspace / "transcripts.log").read_text().splitlines()]
    assert sizes == [[1, 4], [1, 6]]
