"""A Claude-Code-style hook script (POSIX sh, JSON on stdin read with sed and python3, exit 2 to
block) blocks a tool call and a stop, end to end: through the real gateway and the emulator (both
production model callers), and through ``switchyard agent --hooks``. The token budget's
continuations through ``switchyard agent --budget`` too."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

import loop
from emulators import EmulatorConfig, RunningEmulator, emulator_in_thread
from loop.callers import ProviderModelCaller
from loop.cli import main
from loop.deps import ModelCaller
from loop.hooks import load_hooks
from loop.tools import PermissionMode, PermissionPolicy
from loop.tools.builtin import builtin_tools
from loop.transitions import Completed, NextTurn, StopHookBlocking, TokenBudgetContinuation
from tests.loop.support import pairing_violations
from tests.support.loop_stack import LoopStack

# What a hook script written for Claude Code looks like: no jq, the event name read with python3,
# the flag with sed; stderr + exit 2 to block.
GUARD = r"""#!/bin/sh
input=$(cat)
event=$(printf '%s' "$input" | python3 -c 'import json, sys; print(json.load(sys.stdin)["hook_event_name"])')
case "$event" in
  PreToolUse)
    tool=$(printf '%s' "$input" | sed -n 's/.*"tool_name": *"\([^"]*\)".*/\1/p')
    echo "Policy: $tool may not modify files in this repository." >&2
    exit 2
    ;;
  Stop)
    active=$(printf '%s' "$input" | sed -n 's/.*"stop_hook_active": *\(true\|false\).*/\1/p')
    if [ "$active" = "true" ]; then exit 0; fi
    echo "Before stopping, say which files you changed." >&2
    exit 2
    ;;
esac
exit 0
"""
BLOCKED = "Policy: write_file may not modify files in this repository."
STOP_FEEDBACK = "Before stopping, say which files you changed."
KEY = "sk-hooks-e2e"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "README.md").write_text("# project\n")
    return root


@pytest.fixture
def settings_file(tmp_path: Path) -> Path:
    guard = tmp_path / "guard.sh"
    guard.write_text(GUARD)
    guard.chmod(0o755)
    settings = {
        "hooks": {
            "PreToolUse": [
                {"matcher": "write_file|edit_file", "hooks": [{"type": "command", "command": str(guard)}]}
            ],
            "Stop": [{"hooks": [{"type": "command", "command": str(guard), "timeout": 20}]}],
        }
    }
    path = tmp_path / "settings.json"
    path.write_text(json.dumps(settings))
    return path


def texts(message: dict[str, Any]) -> str:
    content = message["content"]
    if isinstance(content, str):
        return content
    return " ".join(str(b.get("text") or b.get("content") or "") for b in content)


async def test_the_script_blocks_a_write_and_a_stop_through_the_gateway(
    caller: ModelCaller, stack: LoopStack, workspace: Path, settings_file: Path
) -> None:
    params = loop.QueryParams(
        messages="[[scenario:agent]] [[tools:write_file]] write the notes",
        system="You are a test agent.",
        tools=builtin_tools(workspace),
        deps=loop.LoopDeps(call_model=caller),
        permissions=PermissionPolicy(mode=PermissionMode.ACCEPT_EDITS),
        hooks=load_hooks(settings_file, cwd=workspace),
    )
    run = loop.query(params)
    assert await run.wait() == Completed("end_turn")
    assert run.state.transitions == (NextTurn(1), StopHookBlocking((STOP_FEEDBACK,)))
    assert await asyncio.to_thread(lambda: sorted(p.name for p in workspace.iterdir())) == ["README.md"]
    sent = stack.message_bodies()
    assert len(sent) == 3
    result = sent[1]["messages"][-1]["content"][0]
    assert result["type"] == "tool_result" and result["is_error"] is True
    assert result["content"] == f"A PreToolUse hook denied the write_file call: {BLOCKED}"
    assert STOP_FEEDBACK in texts(sent[2]["messages"][-1])
    # the emulator saw both: it summarised the refused call, then answered the hook's feedback
    assert "The write_file tool failed with: A PreToolUse hook denied" in texts(run.messages[3])
    assert STOP_FEEDBACK in texts(run.messages[-1])
    for body in sent:
        assert pairing_violations(body["messages"]) == []


async def test_the_task_budget_goes_upstream_and_the_emulator_takes_it(stack: LoopStack) -> None:
    async with ProviderModelCaller.from_environ(stack.upstream_environ()) as provider:
        params = loop.QueryParams(
            messages="write the report",
            config=loop.LoopConfig(token_budget=50_000),
            deps=loop.LoopDeps(call_model=provider),
        )
        run = loop.query(params)
        assert await run.wait() == Completed("end_turn")
    sent = stack.message_bodies()
    assert [b["output_config"]["task_budget"] for b in sent] == [{"type": "tokens", "total": 50_000}] * 4
    assert [type(t) for t in run.state.transitions] == [TokenBudgetContinuation] * 3


@pytest.fixture
def threaded_emulator() -> Iterator[RunningEmulator]:
    with emulator_in_thread(EmulatorConfig(api_keys=frozenset({KEY}))) as emu:
        yield emu


def agent(emulator: RunningEmulator, workspace: Path, prompt: str, *extra: str) -> list[str]:
    return [
        prompt,
        "--workspace",
        str(workspace),
        "--base-url",
        emulator.base_url,
        "--api-key",
        KEY,
        "--json",
        *extra,
    ]


def test_switchyard_agent_hooks(
    threaded_emulator: RunningEmulator,
    workspace: Path,
    settings_file: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = agent(
        threaded_emulator,
        workspace,
        "[[scenario:agent]] [[tools:write_file]] write",
        "--hooks",
        str(settings_file),
    )
    assert main(argv) == 0
    lines = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    finished = next(line for line in lines if line["type"] == "tool_finished")
    assert finished["result"]["is_error"] is True and BLOCKED in finished["result"]["content"]
    transitions = [line for line in lines if line["type"] == "transition"]
    assert [t["reason"] for t in transitions] == ["next_turn", "stop_hook_blocking"]
    assert transitions[1]["errors"] == [STOP_FEEDBACK]
    assert lines[-1] == {
        "type": "terminal",
        "reason": "completed",
        "stop_reason": "end_turn",
        "stop_sequence": None,
    }
    assert sorted(p.name for p in workspace.iterdir()) == ["README.md"]


def test_switchyard_agent_budget_continues_until_returns_diminish(
    threaded_emulator: RunningEmulator, workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(agent(threaded_emulator, workspace, "write a long report", "--budget", "100000")) == 0
    lines = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    continued = [line for line in lines if line["type"] == "transition"]
    # each emulator answer is a few tokens: three continuations, then two small ones in a row stop it
    assert [(t["reason"], t["continuation"]) for t in continued] == [
        ("token_budget_continuation", n) for n in (1, 2, 3)
    ]
    assert sum(1 for line in lines if line["type"] == "assistant") == 4
    assert lines[-1]["reason"] == "completed"


def test_usage_errors_of_the_new_options(
    workspace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"hooks": {"Stop": [{"hooks": [{"type": "carrier-pigeon"}]}]}}')
    for extra, message in (
        (["--hooks", str(bad)], "--hooks: hooks.Stop[0].hooks[0].type 'carrier-pigeon' is not one of"),
        (["--hooks", str(tmp_path / "missing.json")], "--hooks: cannot read hook settings"),
        (["--budget", "0"], "--budget must be >= 1"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            main(["task", "--workspace", str(workspace), *extra])
        assert exit_info.value.code == 2
        assert message in capsys.readouterr().err
