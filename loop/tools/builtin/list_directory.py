"""``list_directory``: the entries of a workspace directory (directories end with ``/``)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from pydantic import Field

from loop.tools.base import Tool, ToolContext, ToolError, ToolInput
from loop.tools.builtin.workspace import Workspace

MAX_ENTRIES = 1000


class ListDirectoryInput(ToolInput):
    path: str = Field(".", description="Directory, relative to the workspace root ('.' for the root)")


class ListDirectory(Tool[ListDirectoryInput]):
    name = "list_directory"
    description = "List the files and directories in a workspace directory (not recursive)."
    input_model = ListDirectoryInput
    read_only = True

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace

    def input_paths(self, tool_input: ListDirectoryInput) -> tuple[str, ...]:
        return (self.workspace.relative_input(tool_input.path),)

    async def call(self, tool_input: ListDirectoryInput, context: ToolContext) -> str:
        path = self.workspace.resolve(tool_input.path)
        return await asyncio.to_thread(self._list, path)

    def _list(self, path: Path) -> str:
        if not path.is_dir():
            raise ToolError(f"not a directory: {self.workspace.relative(path)}")
        entries = sorted(path.iterdir(), key=lambda p: p.name)
        names = [e.name + "/" if e.is_dir() else e.name for e in entries[:MAX_ENTRIES]]
        if len(entries) > MAX_ENTRIES:
            names.append(f"... and {len(entries) - MAX_ENTRIES} more entries")
        return "\n".join(names) if names else "(empty directory)"
