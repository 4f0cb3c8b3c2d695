"""``switchyard agent`` (loop.cli.main) and the agent demo, against the real emulator."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from emulators import EmulatorConfig, RunningEmulator, emulator_in_thread
from loop.cli import main
from loop.demo import DEMO_BEFORE, NEW_TEXT, run_agent_demo
from loop.transitions import Completed
from tests.support.loop_stack import GATEWAY_KEY, LoopStack

KEY = "sk-cli-test"


@pytest.fixture
def threaded_emulator() -> Iterator[RunningEmulator]:
    with emulator_in_thread(EmulatorConfig(api_keys=frozenset({KEY}))) as emu:
        yield emu


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / "notes.txt").write_text("hello\n")
    return tmp_path


def test_agent_through_the_sdk_prints_text_tools_and_the_terminal(
    threaded_emulator: RunningEmulator, workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "[[scenario:agent]] [[tools:list_directory]] look around",
            "--workspace",
            str(workspace),
            "--base-url",
            threaded_emulator.base_url,
            "--api-key",
            KEY,
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "I'll use the list_directory tool." in out
    assert "  -> list_directory (toolu_emu_" in out and "  <- list_directory ok (9 chars," in out
    assert "All tools finished (list_directory). The list_directory tool returned: notes.txt" in out
    assert out.rstrip().endswith('[completed] {"stop_reason":"end_turn","stop_sequence":null}')


def test_json_lines_through_the_environment_configured_provider(
    threaded_emulator: RunningEmulator,
    workspace: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", threaded_emulator.base_url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    code = main(["[[scenario:agent]] [[tools:read_file]] read", "--workspace", str(workspace), "--json"])
    lines = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert code == 0
    kinds = {line["type"] for line in lines}
    assert {
        "stream_event",
        "assistant",
        "tool_started",
        "tool_finished",
        "tool_results",
        "transition",
    } <= kinds
    assert lines[-1] == {
        "type": "terminal",
        "reason": "completed",
        "stop_reason": "end_turn",
        "stop_sequence": None,
    }
    finished = next(line for line in lines if line["type"] == "tool_finished")
    assert finished["result"]["is_error"] is True  # the emulator asked for "path example", which is not there


def test_exit_code_is_nonzero_unless_completed(
    threaded_emulator: RunningEmulator, workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [
        "[[scenario:refusal]] hi",
        "--workspace",
        str(workspace),
        "--base-url",
        threaded_emulator.base_url,
    ]
    assert main([*argv, "--api-key", KEY]) == 1
    assert "[refusal]" in capsys.readouterr().out
    assert main(["[[scenario:pause_turn]] hi", *argv[1:], "--api-key", KEY, "--max-turns", "2"]) == 1
    assert capsys.readouterr().out.rstrip().endswith('[max_turns] {"max_turns":2}')


def test_plan_mode_refuses_edits(
    threaded_emulator: RunningEmulator, workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "[[scenario:agent]] [[tools:write_file]] write",
            "--workspace",
            str(workspace),
            "--permission-mode",
            "plan",
            "--base-url",
            threaded_emulator.base_url,
            "--api-key",
            KEY,
            "--json",
        ]
    )
    lines = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert code == 0
    finished = next(line for line in lines if line["type"] == "tool_finished")
    assert "plan mode allows read-only tools only" in finished["result"]["content"]
    assert sorted(p.name for p in workspace.iterdir()) == ["notes.txt"]


def test_usage_errors(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["task", "--workspace", str(workspace / "missing")])
    assert exc.value.code == 2
    with pytest.raises(SystemExit):
        main(["task", "--workspace", str(workspace), "--base-url", "http://127.0.0.1:1"])
    assert "--base-url needs --api-key" in capsys.readouterr().err


def test_a_bad_environment_is_a_configuration_error(
    workspace: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "not a url")
    assert main(["task", "--workspace", str(workspace)]) == 2
    assert "ANTHROPIC_BASE_URL" in capsys.readouterr().err


async def test_the_agent_demo_reads_edits_and_reads_the_cache(stack: LoopStack, tmp_path: Path) -> None:
    result = await run_agent_demo(stack.gateway_url, GATEWAY_KEY, workspace=tmp_path)
    assert result.terminal == Completed("end_turn")
    assert result.file_before == DEMO_BEFORE and result.edited
    assert (tmp_path / "notes.md").read_text() == DEMO_BEFORE.replace("status: TODO", NEW_TEXT)
    assert [row.stop_reason for row in result.rows] == ["tool_use", "tool_use", "end_turn"]
    first, *later = result.rows
    assert first.cache_read_input_tokens == 0 and first.cache_creation_input_tokens > 2048
    previous = first
    for row in later:  # each turn reads the whole prefix the previous one cached
        assert (
            row.cache_read_input_tokens
            == previous.cache_read_input_tokens + previous.cache_creation_input_tokens
        )
        previous = row
    assert "cache read" in result.table().splitlines()[0]
