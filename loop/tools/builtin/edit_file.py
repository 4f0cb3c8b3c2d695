"""``edit_file``: replace one exact, unique occurrence of a string in a workspace file.

The file is read and rewritten through one descriptor, opened only after the checks of
``safe_io`` (a regular file with a single link: hard-linked files are never edited).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from pydantic import Field

from loop.tools.base import Tool, ToolContext, ToolError, ToolInput
from loop.tools.builtin import safe_io
from loop.tools.builtin.workspace import Workspace


class EditFileInput(ToolInput):
    path: str = Field(description="File path, relative to the workspace root")
    old_string: str = Field(description="The exact text to replace; it must occur exactly once")
    new_string: str = Field(description="The replacement text")


class EditFile(Tool[EditFileInput]):
    name = "edit_file"
    description = (
        "Edit a workspace file by replacing the exact text old_string (which must occur exactly "
        "once; include surrounding lines to make it unique) with new_string."
    )
    input_model = EditFileInput

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace

    def input_paths(self, tool_input: EditFileInput) -> tuple[str, ...]:
        return (self.workspace.relative_input(tool_input.path),)

    async def call(self, tool_input: EditFileInput, context: ToolContext) -> str:
        if not tool_input.old_string:
            raise ToolError("old_string must not be empty (use write_file to create a file)")
        if tool_input.old_string == tool_input.new_string:
            raise ToolError("old_string and new_string are identical: nothing to change")
        path = self.workspace.resolve(tool_input.path)
        return await asyncio.to_thread(self._edit, path, tool_input.old_string, tool_input.new_string)

    def _edit(self, path: Path, old: str, new: str) -> str:
        shown = self.workspace.relative(path)
        st = safe_io.lstat(str(path), shown)
        if st is None:
            raise ToolError(f"file not found: {shown}")
        safe_io.require_regular(st, shown)
        safe_io.require_single_link(st, shown)
        safe_io.require_size(st.st_size, shown)
        with safe_io.opened(str(path), shown, os.O_RDWR, st) as fd:
            text = self.workspace.decode(safe_io.read_fd(fd, shown), shown)
            count = text.count(old)
            if count == 0:
                raise ToolError(f"old_string not found in {shown}")
            if count > 1:
                raise ToolError(
                    f"old_string occurs {count} times in {shown}; include more context to make it unique"
                )
            safe_io.write_fd(fd, safe_io.encode(text.replace(old, new, 1), "new_string"), shown)
        line = text[: text.index(old)].count("\n") + 1
        return f"Edited {shown}: replaced 1 occurrence at line {line}."
