"""``write_file``: create or overwrite a workspace file (destructive: it can clobber a file)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from pydantic import Field

from loop.tools.base import Tool, ToolContext, ToolError, ToolInput
from loop.tools.builtin.workspace import Workspace


class WriteFileInput(ToolInput):
    path: str = Field(description="File path, relative to the workspace root")
    content: str = Field(description="The complete new content of the file")


class WriteFile(Tool[WriteFileInput]):
    name = "write_file"
    description = "Create a workspace file, or replace the whole content of an existing one."
    input_model = WriteFileInput
    destructive = True

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace

    def input_paths(self, tool_input: WriteFileInput) -> tuple[str, ...]:
        return (self.workspace.relative_input(tool_input.path),)

    async def call(self, tool_input: WriteFileInput, context: ToolContext) -> str:
        path = self.workspace.resolve(tool_input.path)
        return await asyncio.to_thread(self._write, path, tool_input.content)

    def _write(self, path: Path, content: str) -> str:
        shown = self.workspace.relative(path)
        if path.is_dir():
            raise ToolError(f"is a directory: {shown}")
        existed = path.exists()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
        verb = "Overwrote" if existed else "Created"
        return f"{verb} {shown} ({len(content)} characters)."
