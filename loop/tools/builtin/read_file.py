"""``read_file``: a text file of the workspace, optionally a range of lines."""

from __future__ import annotations

import asyncio

from pydantic import Field

from loop.tools.base import Tool, ToolContext, ToolInput
from loop.tools.builtin.workspace import Workspace


class ReadFileInput(ToolInput):
    path: str = Field(description="File path, relative to the workspace root")
    offset: int = Field(1, ge=1, description="First line to return (1-based)")
    limit: int | None = Field(None, ge=1, description="Maximum number of lines to return")


class ReadFile(Tool[ReadFileInput]):
    name = "read_file"
    description = "Read a text file of the workspace. Use offset/limit to read part of a long file."
    input_model = ReadFileInput
    read_only = True

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace

    def input_paths(self, tool_input: ReadFileInput) -> tuple[str, ...]:
        return (self.workspace.relative_input(tool_input.path),)

    async def call(self, tool_input: ReadFileInput, context: ToolContext) -> str:
        path = self.workspace.resolve(tool_input.path)
        text = await asyncio.to_thread(self.workspace.read_text, path)
        if tool_input.offset == 1 and tool_input.limit is None:
            return text if text else "(empty file)"
        lines = text.splitlines(keepends=True)
        start = tool_input.offset - 1
        end = len(lines) if tool_input.limit is None else start + tool_input.limit
        selected = "".join(lines[start:end])
        return (
            selected if selected else f"(no lines from line {tool_input.offset}: the file has {len(lines)})"
        )
