"""``search_files``: an RE2 regular expression over the text files under a workspace directory.

Patterns are RE2 (``line_regex``), never Python's ``re``. The walk follows no directory symlink,
opens files through ``safe_io`` only, and stops at ``MAX_MATCHES``, its time budget or the
call's cancellation.

Details: docs/internals/loop-tools.md
"""

from __future__ import annotations

import asyncio
import fnmatch
import os
import stat
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from pydantic import Field

from loop.tools.base import Tool, ToolContext, ToolError, ToolInput
from loop.tools.builtin import safe_io
from loop.tools.builtin.line_regex import LineRegex
from loop.tools.builtin.links import LinkIndex
from loop.tools.builtin.workspace import MAX_FILE_BYTES, Workspace

MAX_MATCHES = 200
MAX_LINE_CHARS = 300
MAX_PATTERN_CHARS = 2000
TIME_BUDGET_S = 30.0
TIMEOUT_SHARE = 0.75

_SKIPPED = {
    "special": "not regular files (FIFO, socket, device, symbolic link loop)",
    "links": "with hard links not all inside the workspace",
    "large": f"over {MAX_FILE_BYTES} bytes",
    "unreadable": "unreadable",
}


class SearchFilesInput(ToolInput):
    pattern: str = Field(
        max_length=MAX_PATTERN_CHARS,
        description="Regular expression in RE2 syntax (no backreferences, no lookaround), searched "
        "line by line",
    )
    path: str = Field(".", description="Directory to search, relative to the workspace root")
    glob: str | None = Field(
        None, max_length=256, description="Only files whose name matches this glob, e.g. '*.py'"
    )


class SearchFiles(Tool[SearchFilesInput]):
    name = "search_files"
    description = (
        "Search the workspace's text files for a regular expression (RE2 syntax: no backreferences "
        f"or lookaround). Returns 'path:line: text' for each matching line (at most {MAX_MATCHES})."
    )
    input_model = SearchFilesInput
    read_only = True

    def __init__(self, workspace: Workspace, *, time_budget_s: float = TIME_BUDGET_S) -> None:
        self.workspace = workspace
        self.time_budget_s = time_budget_s

    def input_paths(self, tool_input: SearchFilesInput) -> tuple[str, ...]:
        return (self.workspace.relative_input(tool_input.path),)

    async def call(self, tool_input: SearchFilesInput, context: ToolContext) -> str:
        regex = LineRegex(tool_input.pattern)
        base = self.workspace.resolve(tool_input.path)
        budget = self.time_budget_s
        if context.timeout_s is not None:
            budget = min(budget, TIMEOUT_SHARE * context.timeout_s)
        stop = threading.Event()
        walk = _Walk(self.workspace, regex, tool_input.glob, budget, context.clock.now, stop)
        try:
            return await asyncio.to_thread(walk.run, base)
        finally:
            stop.set()  # cancelled (the dispatcher's timeout): the thread ends at its next check


class _Walk:
    """One search: the walk, its matches and why it stopped."""

    def __init__(
        self,
        workspace: Workspace,
        regex: LineRegex,
        glob: str | None,
        budget_s: float,
        now: Callable[[], float],
        stop: threading.Event,
    ) -> None:
        self.workspace = workspace
        self.regex = regex
        self.glob = glob
        self.budget_s = budget_s
        self.now = now
        self.deadline = now() + budget_s
        self.stop = stop
        self.links = LinkIndex(workspace.root, should_stop=self.expired)
        self.matches: list[str] = []
        self.searched = 0
        self.skipped: Counter[str] = Counter()
        self.out_of_time = False

    def expired(self) -> bool:
        if self.stop.is_set():
            return True
        if self.now() >= self.deadline:
            self.out_of_time = True
        return self.out_of_time

    def full(self) -> bool:
        return len(self.matches) >= MAX_MATCHES

    def run(self, base: Path) -> str:
        shown = self.workspace.relative(base)
        st = safe_io.lstat(str(base), shown)
        if st is None or not stat.S_ISDIR(st.st_mode):
            raise ToolError(f"not a directory: {shown}")
        stack = [str(base)]
        while stack and not self.full() and not self.expired():
            directory = stack.pop()
            try:
                with os.scandir(directory) as scan:
                    entries = sorted(scan, key=lambda e: e.name)
            except OSError:
                self.skipped["unreadable"] += 1
                continue
            subdirs: list[str] = []
            for entry in entries:
                if self.full() or self.expired():
                    break
                if entry.is_dir(follow_symlinks=False):
                    subdirs.append(entry.path)
                elif self.glob is None or fnmatch.fnmatch(entry.name, self.glob):
                    self._search_file(entry)
            stack.extend(reversed(subdirs))  # depth first, in name order (as os.walk)
        return self._report()

    def _search_file(self, entry: os.DirEntry[str]) -> None:
        target = entry.path
        shown = self.workspace.relative(Path(target))
        try:
            if entry.is_symlink():
                target = os.path.realpath(target)
                if not Path(target).is_relative_to(self.workspace.root):
                    return  # a symlink out of the workspace is not followed
                st = os.lstat(target)
                if stat.S_ISDIR(st.st_mode):
                    return  # nor is a symlink to a directory (it is searched where it is)
            else:
                st = entry.stat(follow_symlinks=False)
        except OSError:
            self.skipped["unreadable"] += 1
            return
        if not stat.S_ISREG(st.st_mode):
            self.skipped["special"] += 1
            return
        if st.st_size > safe_io.MAX_FILE_BYTES:
            self.skipped["large"] += 1
            return
        if not self.links.all_inside(st):
            self.skipped["links"] += 1
            return
        try:
            data = safe_io.read_regular(target, shown, st)
        except ToolError:
            self.skipped["unreadable"] += 1
            return
        if b"\x00" in data:
            return  # binary
        self.searched += 1
        lines = data.decode("utf-8", "replace").splitlines()
        for index in self.regex.matching_lines(lines, self.expired):
            self.matches.append(f"{shown}:{index + 1}: {lines[index][:MAX_LINE_CHARS]}")
            if self.full():
                return

    def _report(self) -> str:
        lines = self.matches or ["(no matches)"]
        if self.full():
            lines.append(f"(stopped after {MAX_MATCHES} matches)")
        if self.out_of_time:
            lines.append(
                f"(search stopped after its time budget of {self.budget_s:g}s, {self.searched} files "
                "searched: the results are partial; narrow the path or the glob)"
            )
        if self.skipped:
            details = ", ".join(f"{n} {_SKIPPED[why]}" for why, n in sorted(self.skipped.items()))
            lines.append(f"(files not searched: {details})")
        return "\n".join(lines)
