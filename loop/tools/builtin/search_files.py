"""``search_files``: a regular expression over the text files under a workspace directory."""

from __future__ import annotations

import asyncio
import fnmatch
import os
import re
from pathlib import Path

from pydantic import Field

from loop.tools.base import Tool, ToolContext, ToolError, ToolInput
from loop.tools.builtin.workspace import MAX_FILE_BYTES, Workspace

MAX_MATCHES = 200
MAX_LINE_CHARS = 300


class SearchFilesInput(ToolInput):
    pattern: str = Field(description="Regular expression (Python syntax) searched line by line")
    path: str = Field(".", description="Directory to search, relative to the workspace root")
    glob: str | None = Field(None, description="Only files whose name matches this glob, e.g. '*.py'")


class SearchFiles(Tool[SearchFilesInput]):
    name = "search_files"
    description = (
        "Search the workspace's text files for a regular expression. Returns 'path:line: text' "
        f"for each matching line (at most {MAX_MATCHES})."
    )
    input_model = SearchFilesInput
    read_only = True

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace

    def input_paths(self, tool_input: SearchFilesInput) -> tuple[str, ...]:
        return (self.workspace.relative_input(tool_input.path),)

    async def call(self, tool_input: SearchFilesInput, context: ToolContext) -> str:
        try:
            regex = re.compile(tool_input.pattern)
        except re.error as exc:
            raise ToolError(f"invalid regular expression {tool_input.pattern!r}: {exc}") from None
        base = self.workspace.resolve(tool_input.path)
        return await asyncio.to_thread(self._search, regex, base, tool_input.glob)

    def _search(self, regex: re.Pattern[str], base: Path, glob: str | None) -> str:
        if not base.is_dir():
            raise ToolError(f"not a directory: {self.workspace.relative(base)}")
        matches: list[str] = []
        for directory, subdirs, files in os.walk(base):
            subdirs.sort()
            for name in sorted(files):
                if glob is not None and not fnmatch.fnmatch(name, glob):
                    continue
                for line in self._matching_lines(Path(directory, name), regex):
                    matches.append(line)
                    if len(matches) >= MAX_MATCHES:
                        return "\n".join([*matches, f"(stopped after {MAX_MATCHES} matches)"])
        return "\n".join(matches) if matches else "(no matches)"

    def _matching_lines(self, path: Path, regex: re.Pattern[str]) -> list[str]:
        real = path.resolve()
        if not real.is_relative_to(self.workspace.root) or not real.is_file():
            return []  # a symlink out of the workspace is not followed
        if real.stat().st_size > MAX_FILE_BYTES:
            return []
        data = real.read_bytes()
        if b"\x00" in data:
            return []
        shown = self.workspace.relative(path.parent.resolve() / path.name)
        return [
            f"{shown}:{number}: {line[:MAX_LINE_CHARS]}"
            for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), start=1)
            if regex.search(line)
        ]
