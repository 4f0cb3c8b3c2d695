"""``switchyard agent`` (a real subprocess) in a workspace of symbolic link loops, a FIFO, a socket
and a hard link to an outside file, against the emulator: every tool call is an error result,
the run completes, the process exits 0 without a traceback, and nothing outside is touched."""

from __future__ import annotations

import contextlib
import io
import os
import socket
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from emulators import EmulatorConfig, RunningEmulator, emulator_in_thread
from loop.cli import main

KEY = "sk-hostile-workspace"
ROOT = Path(__file__).resolve().parents[2]
TOOLS = ["read_file", "list_directory", "write_file", "search_files", "edit_file"]
"""Failing and succeeding calls alternate: three failing turns in a row would trip a guardrail."""
EXAMPLE_PATH = "path example"
"""The emulator fills a tool's required string ``path`` with ``"<name> example"``."""


@pytest.fixture
def threaded_emulator() -> Iterator[RunningEmulator]:
    with emulator_in_thread(EmulatorConfig(api_keys=frozenset({KEY}))) as emu:
        yield emu


def run_agent(emulator: RunningEmulator, workspace: Path, *tools: str) -> subprocess.CompletedProcess[str]:
    task = f"[[scenario:agent]] [[tools:{','.join(tools)}]] look at the workspace"
    return subprocess.run(
        [
            *(sys.executable, "-m", "gateway", "agent", task, "--workspace", str(workspace), "--json"),
            *("--base-url", emulator.base_url, "--api-key", KEY, "--permission-mode", "bypassPermissions"),
        ],
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,  # the process starts in seconds; a loaded 2-core machine can take 15
        stdin=subprocess.DEVNULL,
    )


def tool_results(stdout: str) -> dict[str, dict[str, object]]:
    events = [orjson.loads(line) for line in stdout.splitlines()]
    return {e["name"]: e["result"] for e in events if e["type"] == "tool_finished"}


def test_a_symlink_loop_ends_in_error_results_and_a_clean_exit(
    threaded_emulator: RunningEmulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    os.symlink(EXAMPLE_PATH, workspace / EXAMPLE_PATH)  # what every file tool is pointed at
    os.symlink("b", workspace / "a")
    os.symlink("a", workspace / "b")
    os.mkfifo(workspace / "pipe")
    outside = tmp_path / "outside.txt"
    outside.write_text("secret\n")
    os.link(outside, workspace / "linked.txt")
    monkeypatch.chdir(workspace)  # a relative name keeps the socket path under the 108-byte limit
    with socket.socket(socket.AF_UNIX) as server:
        server.bind("sock")
        process = run_agent(threaded_emulator, workspace, *TOOLS)
    assert "Traceback" not in process.stderr and "Traceback" not in process.stdout
    assert process.returncode == 0, process.stderr
    results = tool_results(process.stdout)
    for tool in ("read_file", "write_file", "edit_file"):
        assert results[tool]["is_error"] is True
        assert results[tool]["content"] == (
            f"path {EXAMPLE_PATH!r} does not resolve: symbolic link loop (or too many levels of links)"
        )
    assert results["list_directory"]["content"] == (
        "a [symbolic link loop]\nb [symbolic link loop]\nlinked.txt\n"
        "path example [symbolic link loop]\npipe [FIFO (named pipe)]\nsock [socket]"
    )
    assert results["search_files"]["content"] == (
        "(no matches)\n(files not searched: 1 with hard links not all inside the workspace, "
        "5 not regular files (FIFO, socket, device, symbolic link loop))"
    )
    assert orjson.loads(process.stdout.splitlines()[-1])["reason"] == "completed"
    assert outside.read_text() == "secret\n" and stat.S_ISFIFO(os.lstat(workspace / "pipe").st_mode)


def test_the_agent_pointed_at_a_fifo_completes_and_leaves_no_blocked_thread(
    threaded_emulator: RunningEmulator, tmp_path: Path
) -> None:
    os.mkfifo(tmp_path / EXAMPLE_PATH)
    codes: list[int] = []
    out = io.StringIO()

    def agent() -> None:
        task = f"[[scenario:agent]] [[tools:{','.join(TOOLS)}]] look"
        argv = [task, "--workspace", str(tmp_path), "--json", "--base-url", threaded_emulator.base_url]
        with contextlib.redirect_stdout(out):
            codes.append(main([*argv, "--api-key", KEY, "--permission-mode", "bypassPermissions"]))

    # main() runs asyncio.run, which joins the tool worker threads before returning
    thread = threading.Thread(target=agent, daemon=True)
    thread.start()
    thread.join(30)
    if thread.is_alive():
        os.close(os.open(tmp_path / EXAMPLE_PATH, os.O_RDWR | os.O_NONBLOCK))  # unblock, then fail
        thread.join(5)
        pytest.fail("switchyard agent did not return: a worker thread is blocked on the FIFO")
    assert codes == [0]
    results = tool_results(out.getvalue())
    for tool in ("read_file", "write_file", "edit_file"):
        assert str(results[tool]["content"]).startswith(f"not a regular file: {EXAMPLE_PATH} is a FIFO")
