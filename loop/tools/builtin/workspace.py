"""Confinement of the file tools to one workspace directory.

Every path a model gives is resolved against the workspace root, following symlinks
(``Path.resolve``), and refused unless the result is the root or inside it: ``../`` traversal,
absolute paths elsewhere and symlinks pointing out of the root are all refused the same way, and
a path that does not resolve (a symbolic link loop) is refused with a ``ToolError``, never an
exception. What the resolved path may be opened as is ``safe_io``'s rule (regular files only,
checked before opening, opened without blocking). Hard links: a regular file with more than one
link is read only when all its links are found inside the workspace (``links.LinkIndex``), and
never written or edited.
"""

from __future__ import annotations

import os
from pathlib import Path

from loop.tools.base import ToolError
from loop.tools.builtin import safe_io
from loop.tools.builtin.links import LinkIndex
from loop.tools.builtin.safe_io import MAX_FILE_BYTES

__all__ = ["MAX_FILE_BYTES", "Workspace"]


class Workspace:
    def __init__(self, root: str | Path) -> None:
        resolved = Path(root).expanduser().resolve(strict=True)
        if not resolved.is_dir():
            raise ValueError(f"workspace root is not a directory: {resolved}")
        self.root = resolved

    def resolve(self, raw: str) -> Path:
        """The real path ``raw`` names, or ``ToolError`` if it is outside the workspace or does
        not resolve."""
        if not raw or "\x00" in raw:
            raise ToolError(f"invalid path {raw!r}")
        try:
            os.fsencode(raw)
            candidate = Path(raw).expanduser()
        except (UnicodeError, RuntimeError):  # a lone surrogate; ``~user`` that does not exist
            raise ToolError(f"invalid path {raw!r}") from None
        if not candidate.is_absolute():
            candidate = self.root / candidate
        try:
            resolved = candidate.resolve(strict=False)
        except (RuntimeError, OSError):  # ELOOP: RuntimeError up to 3.12, OSError from 3.13
            raise ToolError(
                f"path {raw!r} does not resolve: symbolic link loop (or too many levels of links)"
            ) from None
        if not resolved.is_relative_to(self.root):
            raise ToolError(f"path {raw!r} is outside the workspace; use a path inside {self.root}")
        return resolved

    def relative(self, path: Path) -> str:
        """``path`` (already resolved) relative to the root, POSIX style; ``.`` for the root."""
        return path.relative_to(self.root).as_posix() or "."

    def relative_input(self, raw: str) -> str:
        return self.relative(self.resolve(raw))

    def links(self) -> LinkIndex:
        return LinkIndex(self.root)

    def read_text(self, path: Path, links: LinkIndex | None = None) -> str:
        """A workspace file as text; ``ToolError`` for missing, special, oversized or binary
        files and for hard-linked files not shown to be inside the workspace."""
        shown = self.relative(path)
        st = safe_io.lstat(str(path), shown)
        if st is None:
            raise ToolError(f"file not found: {shown}")
        safe_io.require_regular(st, shown)
        self.check_links(st, shown, links or self.links())
        return self.decode(safe_io.read_regular(str(path), shown, st), shown)

    def check_links(self, st: os.stat_result, shown: str, links: LinkIndex) -> None:
        if not links.all_inside(st):
            raise ToolError(
                f"refused: {shown} has {st.st_nlink} hard links and not all of them are inside the "
                "workspace, so it may be a file from outside it"
            )

    @staticmethod
    def decode(data: bytes, shown: str) -> str:
        if b"\x00" in data:
            raise ToolError(f"binary file: {shown}")
        return data.decode("utf-8", errors="replace")
