"""``switchyard agent`` and long sessions: the context options, ``compaction`` / ``context_boundary``
JSON lines, and ``--metrics-port`` scraped while the agent runs, against the real emulator."""

from __future__ import annotations

import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from emulators import EmulatorConfig, RunningEmulator, emulator_in_thread
from loop.cli import build_parser, event_json, loop_config, main
from loop.context.kinds import Layer, Outcome
from loop.events import Compaction, ContextBoundary
from loop.usage import TokenUsage

KEY = "sk-cli-context"
BIG = 30_000
"""Characters of the file the agent reads first: about 10,000 tokens by the loop's estimate."""
TASK = "[[scenario:agent]] [[tools:read_file,list_directory,search_files]] look at everything"
SMALL_WINDOW = ["--context-window", "20000", "--max-output-tokens", "2000"]
"""Effective window 18,000: auto-compact (and collapse) at 9,000, blocking limit at 16,200."""


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    # the emulator fills required string inputs with "<name> example": read_file reads this file
    (tmp_path / "path example").write_text("\n".join(f"line {i}: " + "x" * 50 for i in range(BIG // 60)))
    return tmp_path


@pytest.fixture
def emulator() -> Iterator[RunningEmulator]:
    with emulator_in_thread(EmulatorConfig(api_keys=frozenset({KEY}))) as emu:
        yield emu


def args(workspace: Path, emulator: RunningEmulator, *extra: str) -> list[str]:
    return [TASK, "--workspace", str(workspace), "--base-url", emulator.base_url, "--api-key", KEY, *extra]


def test_a_compaction_in_the_json_lines_and_the_run_completes(
    workspace: Path, emulator: RunningEmulator, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main([*args(workspace, emulator, *SMALL_WINDOW), "--json"])
    lines = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert code == 0 and lines[-1]["reason"] == "completed"
    compactions = [line for line in lines if line["type"] == "compaction"]
    assert len(compactions) == 1
    (collapse,) = compactions
    assert collapse["layer"] == "collapse" and collapse["outcome"] == "applied"
    assert collapse["tokens_before"] >= 9_000 > collapse["tokens_after"]
    assert {"turn", "detail", "breaker_tripped", "usage"} <= collapse.keys()
    called = [line["name"] for line in lines if line["type"] == "tool_started"]
    assert called == ["read_file", "list_directory", "search_files"]  # none called again after it
    requests = [r for r in emulator.requests if r.path.startswith("/v1/messages")]
    assert [orjson.loads(r.body)["max_tokens"] for r in requests] == [2_000] * 4
    last = orjson.loads(requests[-1].body)
    assert "[Collapsed context" in orjson.dumps(last["messages"]).decode()
    assert last["system"][0]["text"].startswith("You are a software engineering agent")


def test_the_json_shape_of_the_context_events() -> None:
    boundary = ContextBoundary(7, Layer.SNIP, 1_234, 10, "dropped the 5 oldest turn(s)")
    assert event_json(boundary) == {
        "type": "context_boundary",
        "turn": 7,
        "layer": "snip",
        "tokens_freed": 1_234,
        "messages_removed": 10,
        "detail": "dropped the 5 oldest turn(s)",
    }
    compaction = Compaction(8, Layer.AUTOCOMPACT, 150_000, 9_000, Outcome.APPLIED, "summarised 40 message(s)",
                            usage=TokenUsage(input_tokens=100, output_tokens=50))  # fmt: skip
    shown = event_json(compaction)
    assert {k: shown[k] for k in ("type", "turn", "layer", "tokens_before", "tokens_after", "outcome")} == {
        "type": "compaction",
        "turn": 8,
        "layer": "autocompact",
        "tokens_before": 150_000,
        "tokens_after": 9_000,
        "outcome": "applied",
    }
    assert shown["usage"]["input_tokens"] == 100 and shown["breaker_tripped"] is False
    orjson.dumps(shown)


def parse(*argv: str) -> Any:
    return build_parser().parse_args(["task", "--workspace", ".", *argv])


def test_the_options_make_the_loop_config() -> None:
    config = loop_config(
        parse(
            "--context-window", "30000", "--max-output-tokens", "4096", "--max-tokens-total", "2000000",
            "--max-wall-clock", "0", "--thinking-budget", "2048", "--max-turns", "40",
        )
    )  # fmt: skip
    assert (config.context_window, config.escalated_max_tokens, config.max_tokens) == (30_000, 4_096, 4_096)
    assert config.effective_window == 30_000 - 4_096
    assert config.max_total_tokens == 2_000_000 and config.max_wall_clock_s is None
    assert config.thinking_budget_tokens == 2_048 and config.max_turns == 40
    defaults = loop_config(parse())
    assert (defaults.max_tokens, defaults.escalated_max_tokens, defaults.max_total_tokens) == (
        8_000,
        64_000,
        1_000_000,
    )
    assert loop_config(parse("--max-tokens-total", "0")).max_total_tokens is None
    assert loop_config(parse("--thinking-budget", "16000")).max_tokens == 24_000  # room for the answer


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--thinking-budget", "100"], "--thinking-budget must be >= 1024"),
        (["--thinking-budget", "70000"], "--thinking-budget must be below --max-output-tokens"),
        (["--context-window", "15000"], "--context-window 15000 leaves no room for the prompt"),
        (["--max-wall-clock", "-1"], "--max-wall-clock must be >= 0"),
        (["--max-turns", "0"], "--max-turns must be >= 1"),
        (["--metrics-port", "70000"], "--metrics-port must be between 0 and 65535"),
    ],
)
def test_usage_errors(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["task", "--workspace", str(tmp_path), *argv])
    assert exc.value.code == 2 and message in capsys.readouterr().err


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def scrape(port: int) -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
            assert response.headers["content-type"].startswith("text/plain")
            return str(response.read().decode())
    except OSError:
        return None


def test_metrics_are_served_while_the_agent_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "notes.txt").write_text("hello\n")
    port = free_port()
    # every streamed delta waits 50 ms: the run lasts long enough to be scraped mid-way
    with emulator_in_thread(EmulatorConfig(api_keys=frozenset({KEY}), chunk_delay_s=0.05)) as slow:
        argv = [
            "[[scenario:agent]] [[tools:list_directory,search_files,read_file]] look",
            "--workspace", str(tmp_path), "--base-url", slow.base_url, "--api-key", KEY,
            "--metrics-port", str(port),
        ]  # fmt: skip
        codes: list[int] = []
        thread = threading.Thread(target=lambda: codes.append(main(argv)))
        thread.start()
        seen: str | None = None
        deadline = time.monotonic() + 30
        while thread.is_alive() and time.monotonic() < deadline:
            text = scrape(port)
            if text is not None and 'loop_tool_calls_total{outcome="ok",tool="list_directory"} 1.0' in text:
                seen = text
                break
            time.sleep(0.02)
        thread.join(30)
    assert codes == [0]
    assert seen is not None, "the metrics endpoint never showed the first tool call"
    assert "loop_context_tokens_count 1.0" in seen
    assert 'loop_terminal_total{reason="completed"}' not in seen  # scraped mid-run
    assert scrape(port) is None  # closed with the run
    assert f"metrics on http://127.0.0.1:{port}/metrics" in capsys.readouterr().err


def test_a_metrics_port_in_use_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = main(["task", "--workspace", str(tmp_path), "--metrics-port", str(port)])
    assert code == 2
    assert f"--metrics-port: cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err
