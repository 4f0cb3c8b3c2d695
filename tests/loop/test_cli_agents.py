"""``switchyard agent --agents / --max-subagents / --fallback-model / --max-budget-usd``: sub-agents
from Claude Code's agents JSON (inline or a file) run against the real emulator (the SDK caller),
the cost limit stops a run, the flags reach the ``LoopConfig``, and ``--help`` documents them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from emulators import EmulatorConfig, RunningEmulator, emulator_in_thread
from loop.cli import build_parser, loop_config, main
from loop.subagents.agents_file import load_agents, parse_agents
from loop.testing import FakeTool
from loop.tools.permissions import PermissionMode

KEY = "sk-cli-agents"
AGENTS = {
    "lister": {
        "description": "Lists what is in a directory.",
        "prompt": "You list files and nothing else.",
        "tools": ["list_directory", "read_file"],
        "disallowedTools": ["read_file"],
        "model": "haiku",
        "maxTurns": 4,
        "skills": ["ignored"],
    }
}
DELEGATE = (
    "[[scenario:agent]] [[tools:agent]] "
    '[[input:agent {"description": "list files", "prompt": "What is in this directory?", '
    '"subagent_type": "lister"}]] delegate'
)


@pytest.fixture
def emulator() -> Iterator[RunningEmulator]:
    with emulator_in_thread(EmulatorConfig(api_keys=frozenset({KEY}))) as emu:
        yield emu


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "notes.txt").write_text("hello\n")
    return root


def _argv(prompt: str, workspace: Path, emulator: RunningEmulator, *extra: str) -> list[str]:
    return [prompt, "--workspace", str(workspace), "--base-url", emulator.base_url, "--api-key", KEY, *extra]


def _bodies(emulator: RunningEmulator) -> list[dict[str, Any]]:
    return [orjson.loads(r.body) for r in emulator.requests if r.path.startswith("/v1/messages")]


@pytest.mark.parametrize("inline", [True, False])
def test_agents_json_starts_a_sub_agent_in_a_headless_run(
    emulator: RunningEmulator,
    workspace: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    inline: bool,
) -> None:
    if inline:
        agents = json.dumps(AGENTS)
    else:
        (tmp_path / "agents.json").write_text(json.dumps(AGENTS))
        agents = str(tmp_path / "agents.json")
    code = main(_argv(DELEGATE, workspace, emulator, "--json", "--agents", agents, "--max-subagents", "1"))
    lines = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert code == 0, lines[-1]
    tasks = [line for line in lines if line["type"] == "task"]
    assert [t["state"] for t in tasks] == ["pending", "running", "completed"]
    assert tasks[-1]["agent"] == "lister"
    assert tasks[-1]["result"] == "Echo: What is in this directory?"
    assert tasks[-1]["usage"]["cost_usd"] > 0 and tasks[-1]["usage"]["input_tokens"] > 0
    parent, child, after = _bodies(emulator)
    assert "agent" in [t["name"] for t in parent["tools"]]
    assert child["model"] == "claude-haiku-5-5"  # the alias, as Claude Code sends it first party
    assert child["system"][0]["text"] == "You list files and nothing else."
    names = [t["name"] for t in child["tools"]]
    assert "list_directory" in names and "read_file" not in names and "agent" not in names
    assert after["messages"][-1]["content"][0]["content"] == "Echo: What is in this directory?"


def test_max_budget_usd_stops_the_run(
    emulator: RunningEmulator, workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prompt = '[[scenario:agent]] [[tools:list_directory]] [[input:list_directory {"path": "."}]] look'
    code = main(_argv(prompt, workspace, emulator, "--json", "--max-budget-usd", "0.000001"))
    lines = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert code == 1
    terminal = lines[-1]
    assert terminal["reason"] == "guardrail" and terminal["kind"] == "cost", terminal
    assert len(_bodies(emulator)) == 1  # the second call was never sent


def test_the_flags_reach_the_config() -> None:
    args = build_parser().parse_args(
        ["t", "--workspace", ".", "--fallback-model", "claude-haiku-4-5", "--max-budget-usd", "2.5"]
    )
    config = loop_config(args)
    assert config.fallback_model == "claude-haiku-4-5" and config.max_cost_usd == 2.5
    assert args.max_subagents == 4 and args.agents is None
    for bad, message in (
        (["--fallback-model", "a,b"], "--fallback-model takes one model"),
        (["--max-budget-usd", "0"], "--max-budget-usd must be a number greater than 0"),
        (["--max-subagents", "0"], "--max-subagents must be >= 1"),
    ):
        with pytest.raises(ValueError, match=message):
            loop_config(build_parser().parse_args(["t", "--workspace", ".", *bad]))


def test_bad_agents_are_a_configuration_error(
    workspace: Path, emulator: RunningEmulator, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = json.dumps({"x": {"description": "d", "prompt": "p", "tools": ["nope"]}})
    assert main(_argv("t", workspace, emulator, "--agents", bad)) == 2
    assert "--agents: x: no tool nope; the run's tools: read_file" in capsys.readouterr().err


def test_the_agents_file_rules() -> None:
    tools = [FakeTool("read"), FakeTool("mcp__fs__read"), FakeTool("mcp__fs__write"), FakeTool("mcp__gh__pr")]
    (everything,) = parse_agents({"a": {"description": "d", "prompt": "p", "model": "inherit"}}, tools)
    assert [t.name for t in everything.tools] == [t.name for t in tools] and everything.model is None
    assert everything.permission_mode is PermissionMode.BUBBLE
    for rule, left in (
        ("mcp__fs", ["read", "mcp__gh__pr"]),
        ("mcp__fs__*", ["read", "mcp__gh__pr"]),
        ("mcp__*", ["read"]),
        ("mcp__fs__write", ["read", "mcp__fs__read", "mcp__gh__pr"]),
    ):
        (agent,) = parse_agents({"a": {"description": "d", "prompt": "p", "disallowedTools": [rule]}}, tools)
        assert [t.name for t in agent.tools] == left, rule
    (plan,) = parse_agents(
        {"a": {"description": "d", "prompt": "p", "permissionMode": "plan", "model": "claude-x"}}, tools
    )
    assert plan.permission_mode is PermissionMode.PLAN and plan.model == "claude-x"
    for spec, message in (
        ({"prompt": "p"}, "description must be a non-empty string"),
        ({"description": "d", "prompt": "p", "maxTurns": 0}, "maxTurns must be a positive integer"),
        ({"description": "d", "prompt": "p", "permissionMode": "yolo"}, "permissionMode must be one of"),
    ):
        with pytest.raises(ValueError, match=message):
            parse_agents({"a": spec}, tools)
    with pytest.raises(ValueError, match="cannot read agents file"):
        load_agents("/nonexistent/agents.json", tools)
    with pytest.raises(ValueError, match="not valid JSON"):
        load_agents("{nope", tools)


def test_help_documents_the_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    for needle in ("--agents JSON_OR_FILE", "--max-subagents N", "--fallback-model MODEL", "--max-budget-usd USD",
                   "SubagentStart, SubagentStop"):  # fmt: skip
        assert needle in text, needle
