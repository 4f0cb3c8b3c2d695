"""``switchyard agent`` headless: a refused call ends a non-interactive run with its own terminal
and exit code; ``--allow`` and ``--yes`` let it through; ``--mcp-config`` brings MCP tools; the
help says so. Against the real emulator (the SDK caller) and real MCP servers from npm."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from emulators import EmulatorConfig, RunningEmulator, emulator_in_thread
from loop.cli import build_parser, main
from loop.headless import EXIT_PERMISSION_DENIED, allow_rules
from loop.testing import FakeTool
from loop.tools.permissions import PermissionRule
from tests.support.mcp_servers import server_binary

KEY = "sk-cli-headless"
WRITE = (
    '[[scenario:agent]] [[tools:write_file]] [[input:write_file {"path": "out.txt", "content": "new"}]] write'
)


@pytest.fixture
def emulator() -> Iterator[RunningEmulator]:
    with emulator_in_thread(EmulatorConfig(api_keys=frozenset({KEY}))) as emu:
        yield emu


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


def _argv(prompt: str, workspace: Path, emulator: RunningEmulator, *extra: str) -> list[str]:
    return [prompt, "--workspace", str(workspace), "--base-url", emulator.base_url, "--api-key", KEY, *extra]


def _lines(out: str) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in out.splitlines()]


def test_a_refused_destructive_call_ends_a_json_run_with_exit_3(
    emulator: RunningEmulator, workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(_argv(WRITE, workspace, emulator, "--json"))
    lines = _lines(capsys.readouterr().out)
    assert code == EXIT_PERMISSION_DENIED == 3
    terminal = lines[-1]
    assert terminal["type"] == "terminal" and terminal["reason"] == "permission_denied"
    assert terminal["tool_name"] == "write_file"
    assert "--allow write_file or --yes" in str(terminal["message"])
    assert not (workspace / "out.txt").exists()
    results = [line for line in lines if line["type"] == "tool_results"]
    assert len(results) == 1  # the refusal is in the history; the model was not called again
    assert len([r for r in emulator.requests if r.path.startswith("/v1/messages")]) == 1


def test_stdin_not_a_terminal_is_non_interactive_too(
    emulator: RunningEmulator, workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(_argv(WRITE, workspace, emulator))  # pytest's stdin is not a tty
    out = capsys.readouterr().out
    assert code == 3 and "[permission_denied]" in out


@pytest.mark.parametrize("flags", [("--allow", "write_file"), ("--yes",)])
def test_allow_and_yes_let_the_call_through(
    emulator: RunningEmulator, workspace: Path, capsys: pytest.CaptureFixture[str], flags: tuple[str, ...]
) -> None:
    code = main(_argv(WRITE, workspace, emulator, "--json", *flags))
    lines = _lines(capsys.readouterr().out)
    assert code == 0 and lines[-1]["reason"] == "completed"
    assert (workspace / "out.txt").read_text() == "new"


def test_yes_does_not_override_plan_mode(
    emulator: RunningEmulator, workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(_argv(WRITE, workspace, emulator, "--json", "--yes", "--permission-mode", "plan"))
    lines = _lines(capsys.readouterr().out)
    assert code == 0  # plan mode's refusal is an answer the model can work with, not a question
    finished = next(line for line in lines if line["type"] == "tool_finished")
    assert "plan mode allows read-only tools only" in str(finished["result"])
    assert not (workspace / "out.txt").exists()


def test_help_documents_the_headless_behaviour(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    for needle in (
        "--allow TOOL",
        "--yes",
        "--mcp-config FILE",
        "permission_denied",
        "exit code 3",
        "not a\n  terminal",
    ):
        assert needle in text, needle


def test_allow_rules_expand_a_server_name() -> None:
    tools = [FakeTool("mcp__fs__read"), FakeTool("mcp__fs__write"), FakeTool("mcp__fsx__read")]
    assert allow_rules(["mcp__fs", "write_file", "mcp__fsx__read"], tools) == (
        PermissionRule(tool="mcp__fs__read"),
        PermissionRule(tool="mcp__fs__write"),
        PermissionRule(tool="write_file"),
        PermissionRule(tool="mcp__fsx__read"),
    )
    assert build_parser().parse_args(["t", "--workspace", ".", "--allow", "a", "--allow", "b"]).allow == [
        "a",
        "b",
    ]


def test_mcp_config_tools_in_a_headless_run(
    emulator: RunningEmulator, workspace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (workspace / "todo.txt").write_text("buy milk\n")
    config = tmp_path / "mcp.json"
    servers = {
        "fs": {"command": str(server_binary("filesystem")), "args": [str(workspace.resolve())]},
    }
    config.write_text(json.dumps({"mcpServers": servers}))
    todo = str((workspace / "todo.txt").resolve())
    prompt = f'[[scenario:agent]] [[tools:mcp__fs__read_text_file]] [[input:mcp__fs__read_text_file {{"path": "{todo}"}}]] go'
    refused = main(_argv(prompt, workspace, emulator, "--json", "--mcp-config", str(config)))
    first = _lines(capsys.readouterr().out)
    assert refused == 3 and first[-1]["tool_name"] == "mcp__fs__read_text_file"  # MCP tools ask by default
    code = main(
        _argv(prompt, workspace, emulator, "--json", "--mcp-config", str(config), "--allow", "mcp__fs")
    )
    lines = _lines(capsys.readouterr().out)
    assert code == 0, lines[-1]
    finished = next(line for line in lines if line["type"] == "tool_finished")
    assert finished["name"] == "mcp__fs__read_text_file"
    assert finished["result"]["content"] == "buy milk\n"


def test_a_bad_mcp_config_is_a_configuration_error(
    workspace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "mcp.json"
    config.write_text('{"mcpServers": {"x": {"type": "sse", "url": "http://127.0.0.1:1/sse"}}}')
    code = main(["t", "--workspace", str(workspace), "--base-url", "http://127.0.0.1:1", "--api-key", KEY,
                 "--mcp-config", str(config)])  # fmt: skip
    assert code == 2
    assert "--mcp-config: server 'x': the SSE transport is deprecated" in capsys.readouterr().err
