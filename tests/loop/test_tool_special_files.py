"""The file tools on a hostile workspace (real filesystem): symbolic link loops, FIFOs, sockets,
device files, files swapped between check and open, and hard links to files outside it."""

from __future__ import annotations

import asyncio
import os
import socket
import stat
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from loop.deps import SystemClock
from loop.outcome import ToolUse
from loop.tools import PermissionMode, PermissionPolicy, ToolError
from loop.tools.builtin import builtin_tools, safe_io
from loop.tools.dispatcher import ToolDispatcher
from loop.tools.registry import ToolRegistry

BOUND_S = 5.0
"""Generous on a loaded machine; a blocked call would never return at all."""

EVERY_TOOL: list[tuple[str, dict[str, Any]]] = [
    ("read_file", {}),
    ("write_file", {"content": "pwned"}),
    ("edit_file", {"old_string": "a", "new_string": "b"}),
    ("list_directory", {}),
    ("search_files", {"pattern": "a"}),
]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "notes.txt").write_text("alpha\n")
    return root


def dispatcher(root: Path) -> ToolDispatcher:
    return ToolDispatcher(
        ToolRegistry(builtin_tools(root)),
        clock=SystemClock(),
        policy=PermissionPolicy(mode=PermissionMode.BYPASS_PERMISSIONS),
        default_timeout_s=BOUND_S,
    )


async def call(root: Path, name: str, **tool_input: Any) -> dict[str, Any]:
    return await dispatcher(root).dispatch(ToolUse("toolu_x", name, tool_input), turn=1)


def run_in_fresh_loop(scenario: Callable[[], Awaitable[None]], release: Path | None = None) -> float:
    """Run ``scenario`` under ``asyncio.run`` in a thread and return the wall time. ``asyncio.run``
    joins the default executor's worker threads on the way out, so a worker blocked for good (in
    ``open`` on a FIFO...) keeps it from returning: the thread then outlives ``BOUND_S`` and the
    test fails (after opening ``release`` to unblock the worker, so the test process can exit)."""
    errors: list[BaseException] = []

    def target() -> None:
        try:
            asyncio.run(scenario())
        except BaseException as exc:
            errors.append(exc)

    started = time.monotonic()
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(BOUND_S)
    elapsed = time.monotonic() - started
    if thread.is_alive():
        if release is not None:
            os.close(os.open(release, os.O_RDWR | os.O_NONBLOCK))  # unblocks a blocked open
        thread.join(BOUND_S)
        pytest.fail(f"a worker thread was still blocked after {BOUND_S}s")
    if errors:
        raise errors[0]
    return elapsed


@pytest.mark.parametrize("loop_kind", ["self", "pair"])
async def test_symlink_loops_are_error_results_for_every_tool(project: Path, loop_kind: str) -> None:
    if loop_kind == "self":
        os.symlink("loop", project / "loop")
    else:
        os.symlink("b", project / "loop")
        os.symlink("loop", project / "b")
    for path in ("loop", "loop/inner.txt"):
        for tool, extra in EVERY_TOOL:
            result = await call(project, tool, path=path, **extra)
            assert result["is_error"] is True, (tool, path, result)
            assert "symbolic link loop" in result["content"], (tool, path, result)
            assert str(project.parent) not in result["content"]
    listing = await call(project, "list_directory")
    assert "loop [symbolic link loop]" in listing["content"].splitlines()
    search = await call(project, "search_files", pattern="alpha")
    assert search["content"].splitlines()[0] == "notes.txt:1: alpha"
    assert "symbolic link loop" in search["content"]


def test_a_fifo_never_blocks_a_worker_thread(project: Path) -> None:
    fifo = project / "pipe"
    os.mkfifo(fifo)
    results: dict[str, dict[str, Any]] = {}

    async def scenario() -> None:
        d = dispatcher(project)
        for tool, extra in EVERY_TOOL:
            results[tool] = await d.dispatch(ToolUse("toolu_x", tool, {"path": "pipe", **extra}), turn=1)
        results["list ."] = await d.dispatch(ToolUse("toolu_x", "list_directory", {}), turn=1)
        results["search ."] = await d.dispatch(ToolUse("toolu_x", "search_files", {"pattern": "."}), turn=1)

    elapsed = run_in_fresh_loop(scenario, release=fifo)
    assert elapsed < BOUND_S
    for tool in ("read_file", "write_file", "edit_file"):
        assert results[tool]["is_error"] is True
        assert results[tool]["content"] == (
            "not a regular file: pipe is a FIFO (named pipe); the file tools only read and write regular files"
        )
    assert results["list_directory"]["content"] == "not a directory: pipe"
    assert results["search_files"]["content"] == "not a directory: pipe"
    assert results["list ."]["content"] == "notes.txt\npipe [FIFO (named pipe)]"
    assert results["search ."]["content"] == (
        "notes.txt:1: alpha\n(files not searched: 1 not regular files (FIFO, socket, device, symbolic link loop))"
    )
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)  # nothing replaced it


def test_a_fifo_swapped_in_after_the_check_is_refused_without_blocking(project: Path) -> None:
    target = project / "notes.txt"
    checked = os.lstat(target)
    target.unlink()
    os.mkfifo(target)
    started = time.monotonic()
    for flags in (os.O_RDONLY, os.O_WRONLY, os.O_RDWR):
        with (
            pytest.raises(ToolError, match="not a regular file") as error,
            safe_io.opened(str(target), "notes.txt", flags, checked),
        ):
            raise AssertionError("opened a FIFO")
        assert str(project) not in str(error.value)
    assert time.monotonic() - started < BOUND_S


def test_a_symlink_or_another_file_swapped_in_is_refused(project: Path, tmp_path: Path) -> None:
    target = project / "notes.txt"
    checked = os.lstat(target)
    keep = os.open(target, os.O_RDONLY)  # holds the checked inode, so no new file can reuse it
    try:
        (tmp_path / "elsewhere.txt").write_text("outside\n")
        target.unlink()
        os.symlink(tmp_path / "elsewhere.txt", target)
        with (
            pytest.raises(ToolError, match="symbolic link"),
            safe_io.opened(str(target), "n", os.O_RDONLY, checked),
        ):
            raise AssertionError("followed a symlink")
        target.unlink()
        target.write_text("another file\n")
        with (
            pytest.raises(ToolError, match="was replaced"),
            safe_io.opened(str(target), "n", os.O_RDWR, checked),
        ):
            raise AssertionError("opened another file")
    finally:
        os.close(keep)
    assert target.read_text() == "another file\n"


async def test_a_socket_and_a_device_file_are_refused(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(project)  # a relative name keeps the socket path under the 108-byte limit
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind("sock")
    server.listen(1)
    try:
        os.mknod(project / "null", stat.S_IFCHR | 0o666, os.makedev(1, 3))  # a /dev/null of its own
    except PermissionError:
        pytest.skip("creating a device node needs CAP_MKNOD")
    try:
        for name, what in (("sock", "socket"), ("null", "character device")):
            for tool, extra in EVERY_TOOL[:3]:
                result = await call(project, tool, path=name, **extra)
                assert result["is_error"] is True
                assert result["content"].startswith(f"not a regular file: {name} is a {what};"), result
        listing = await call(project, "list_directory")
        assert listing["content"] == "notes.txt\nnull [character device]\nsock [socket]"
        search = await call(project, "search_files", pattern="alpha")
        assert search["content"].startswith("notes.txt:1: alpha\n(files not searched: 2 not regular files")
        devnull = project / "devnull"
        os.symlink("/dev/null", devnull)
        refused = await call(project, "write_file", path="devnull", content="x")
        assert refused["is_error"] and "outside the workspace" in refused["content"]
    finally:
        server.close()


async def test_a_hard_link_to_an_outside_file_is_refused(project: Path, tmp_path: Path) -> None:
    outside = tmp_path / "credentials"
    outside.write_text("aws_secret_access_key = abc\n")
    os.link(outside, project / "innocent.txt")
    write = await call(project, "write_file", path="innocent.txt", content="pwned")
    edit = await call(project, "edit_file", path="innocent.txt", old_string="abc", new_string="pwned")
    read = await call(project, "read_file", path="innocent.txt")
    for result in (write, edit, read):
        assert result["is_error"] is True
        assert result["content"].startswith("refused: innocent.txt has 2 hard links")
        assert "abc" not in result["content"] and str(tmp_path) not in result["content"]
    search = await call(project, "search_files", pattern="secret")
    assert search["content"] == (
        "(no matches)\n(files not searched: 1 with hard links not all inside the workspace)"
    )
    assert outside.read_text() == "aws_secret_access_key = abc\n"
    assert os.stat(outside).st_nlink == 2  # still the same inode under both names


async def test_hard_links_inside_the_workspace_are_read_but_never_written(project: Path) -> None:
    os.link(project / "notes.txt", project / "copy.txt")
    assert (await call(project, "read_file", path="copy.txt"))["content"] == "alpha\n"
    search = await call(project, "search_files", pattern="alpha")
    assert search["content"] == "copy.txt:1: alpha\nnotes.txt:1: alpha"
    write = await call(project, "write_file", path="copy.txt", content="changed")
    assert write["is_error"] and write["content"].startswith("refused: copy.txt has 2 hard links")
    assert (project / "notes.txt").read_text() == "alpha\n"


async def test_reads_stop_at_the_size_limit_and_writes_create_exclusively(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(safe_io, "MAX_FILE_BYTES", 64)
    (project / "big.txt").write_text("x" * 65)
    big = await call(project, "read_file", path="big.txt")
    assert big["is_error"] and big["content"] == "file too large (65 bytes, limit 64): big.txt"
    grown = project / "grows.txt"
    grown.write_text("small\n")
    checked = os.lstat(grown)
    grown.write_text("y" * 100)  # same inode, grew after the check: the read still stops
    with pytest.raises(ToolError, match="file too large"):
        safe_io.read_regular(str(grown), "grows.txt", checked)
    created = await call(project, "write_file", path="sub/new.txt", content="fresh")
    assert created["content"] == "Created sub/new.txt (5 characters)."
    surrogate = await call(project, "write_file", path="bad.txt", content="\ud800")
    assert surrogate["is_error"] and "not valid Unicode" in surrogate["content"]
    assert not (project / "bad.txt").exists()
