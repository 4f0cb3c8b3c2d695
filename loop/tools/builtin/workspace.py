"""Confinement of the file tools to one workspace directory.

Every path a model gives is resolved against the workspace root, following symlinks
(``Path.resolve``), and refused unless the result is the root or inside it: ``../`` traversal,
absolute paths elsewhere and symlinks pointing out of the root are all refused the same way.
"""

from __future__ import annotations

from pathlib import Path

from loop.tools.base import ToolError

MAX_FILE_BYTES = 5 * 1024 * 1024


class Workspace:
    def __init__(self, root: str | Path) -> None:
        resolved = Path(root).expanduser().resolve(strict=True)
        if not resolved.is_dir():
            raise ValueError(f"workspace root is not a directory: {resolved}")
        self.root = resolved

    def resolve(self, raw: str) -> Path:
        """The real path ``raw`` names, or ``ToolError`` if it is outside the workspace."""
        if not raw or "\x00" in raw:
            raise ToolError(f"invalid path {raw!r}")
        candidate = Path(raw).expanduser()
        if not candidate.is_absolute():
            candidate = self.root / candidate
        resolved = candidate.resolve(strict=False)
        if not resolved.is_relative_to(self.root):
            raise ToolError(f"path {raw!r} is outside the workspace; use a path inside {self.root}")
        return resolved

    def relative(self, path: Path) -> str:
        """``path`` (already resolved) relative to the root, POSIX style; ``.`` for the root."""
        return path.relative_to(self.root).as_posix() or "."

    def relative_input(self, raw: str) -> str:
        return self.relative(self.resolve(raw))

    def read_text(self, path: Path) -> str:
        """A workspace file as text; ``ToolError`` for missing, oversized or binary files."""
        if not path.exists():
            raise ToolError(f"file not found: {self.relative(path)}")
        if not path.is_file():
            raise ToolError(f"not a file: {self.relative(path)}")
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise ToolError(f"file too large ({size} bytes, limit {MAX_FILE_BYTES}): {self.relative(path)}")
        data = path.read_bytes()
        if b"\x00" in data:
            raise ToolError(f"binary file: {self.relative(path)}")
        return data.decode("utf-8", errors="replace")
