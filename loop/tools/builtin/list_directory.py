"""``list_directory``: the entries of a workspace directory (directories end with ``/``).

Entries the file tools cannot open are listed with what they are in brackets (``fifo [FIFO (named
pipe)]``, ``loop [symbolic link loop]``...). Nothing is opened but the directory itself, so a FIFO
or a socket in it cannot block the listing; at most ``MAX_ENTRIES`` names are kept (the first in
name order), however large the directory.
"""

from __future__ import annotations

import asyncio
import errno
import heapq
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from pydantic import Field

from loop.tools.base import Tool, ToolContext, ToolError, ToolInput
from loop.tools.builtin import safe_io
from loop.tools.builtin.workspace import Workspace

MAX_ENTRIES = 1000


class ListDirectoryInput(ToolInput):
    path: str = Field(".", description="Directory, relative to the workspace root ('.' for the root)")


class ListDirectory(Tool[ListDirectoryInput]):
    name = "list_directory"
    description = (
        "List the files and directories in a workspace directory (not recursive). Entries that are "
        "not regular files or directories are marked in brackets."
    )
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
        shown = self.workspace.relative(path)
        st = safe_io.lstat(str(path), shown)
        if st is None or not stat.S_ISDIR(st.st_mode):
            raise ToolError(f"not a directory: {shown}")
        seen = [0]

        def counted(scan: Iterator[os.DirEntry[str]]) -> Iterator[str]:
            for entry in scan:
                seen[0] += 1
                yield entry.name

        try:
            with os.scandir(path) as scan:
                first = heapq.nsmallest(MAX_ENTRIES, counted(scan))  # bounded memory, any size
        except OSError as exc:
            raise safe_io.os_error(exc, shown) from None
        names = [_describe(name, os.path.join(path, name)) for name in first]
        if seen[0] > MAX_ENTRIES:
            names.append(f"... and {seen[0] - MAX_ENTRIES} more entries")
        return "\n".join(names) if names else "(empty directory)"


def _describe(name: str, path: str) -> str:
    """``name``, ``name/`` for a directory (or a link to one), ``name [what]`` for the rest."""
    try:
        st = os.stat(path)  # follows links: a link to a directory lists as one, as before
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return f"{name} [symbolic link loop]"
        return f"{name} [broken symbolic link]" if os.path.islink(path) else f"{name} [unreadable]"
    if stat.S_ISDIR(st.st_mode):
        return name + "/"
    if stat.S_ISREG(st.st_mode):
        return name
    return f"{name} [{safe_io.kind(st.st_mode)}]"
