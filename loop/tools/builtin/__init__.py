"""The built-in file tools, confined to one workspace directory.

Public: ``__all__``; the modules inside are internal.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loop.tools.base import Tool
from loop.tools.builtin.edit_file import EditFile, EditFileInput
from loop.tools.builtin.list_directory import ListDirectory, ListDirectoryInput
from loop.tools.builtin.read_file import ReadFile, ReadFileInput
from loop.tools.builtin.search_files import SearchFiles, SearchFilesInput
from loop.tools.builtin.workspace import Workspace
from loop.tools.builtin.write_file import WriteFile, WriteFileInput


def builtin_tools(root: str | Path) -> list[Tool[Any]]:
    """read_file, list_directory, search_files, edit_file and write_file over ``root``."""
    workspace = Workspace(root)
    return [
        ReadFile(workspace),
        ListDirectory(workspace),
        SearchFiles(workspace),
        EditFile(workspace),
        WriteFile(workspace),
    ]


__all__ = [
    "EditFile",
    "EditFileInput",
    "ListDirectory",
    "ListDirectoryInput",
    "ReadFile",
    "ReadFileInput",
    "SearchFiles",
    "SearchFilesInput",
    "Workspace",
    "WriteFile",
    "WriteFileInput",
    "builtin_tools",
]
