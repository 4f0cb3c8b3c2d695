"""``write_file``: create or overwrite a workspace file (destructive: it can clobber a file).

Only a regular file with a single link is overwritten (``safe_io``): a directory, a FIFO, a socket,
a device or a file with other hard links is refused, and a new file is created with ``O_EXCL``.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from pydantic import Field

from loop.tools.base import Tool, ToolContext, ToolInput
from loop.tools.builtin import safe_io
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
        data = safe_io.encode(content, "content")
        st = safe_io.lstat(str(path), shown)
        if st is None:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise safe_io.os_error(exc, self.workspace.relative(path.parent)) from None
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
        else:
            safe_io.require_regular(st, shown)
            safe_io.require_single_link(st, shown)
            flags = os.O_WRONLY
        with safe_io.opened(str(path), shown, flags, st) as fd:
            safe_io.write_fd(fd, data, shown)
        verb = "Created" if st is None else "Overwrote"
        return f"{verb} {shown} ({len(content)} characters)."
