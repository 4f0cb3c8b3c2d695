"""Whether every hard link of a file is inside the workspace.

A regular file with ``st_nlink > 1`` has other names; one of them may be outside the workspace (a
hard link made beforehand to ``~/.ssh/id_ed25519`` resolves, by path, inside the workspace). The
path alone cannot tell, so the file is shown to be inside only by finding all ``st_nlink`` names
under the workspace root: one walk of the tree (not following symbolic links), counting the
names of each (device, inode). The walk is bounded (``MAX_SCAN_ENTRIES`` entries, and the
caller's ``should_stop``); a file whose links were not all found is treated as leading outside.
One index serves one tool call (a search builds it once, on its first multi-link file).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path

MAX_SCAN_ENTRIES = 100_000


class LinkIndex:
    def __init__(
        self,
        root: Path,
        *,
        max_entries: int = MAX_SCAN_ENTRIES,
        should_stop: Callable[[], bool] = lambda: False,
    ) -> None:
        self._root = str(root)
        self._max_entries = max_entries
        self._should_stop = should_stop
        self._counts: Counter[tuple[int, int]] | None = None

    def all_inside(self, st: os.stat_result) -> bool:
        """Whether the ``st_nlink`` names of the file ``st`` describes are all in the workspace."""
        if st.st_nlink <= 1:
            return True
        if self._counts is None:
            self._counts = self._scan()
        return self._counts[(st.st_dev, st.st_ino)] >= st.st_nlink

    def _scan(self) -> Counter[tuple[int, int]]:
        counts: Counter[tuple[int, int]] = Counter()
        seen = 0
        stack = [self._root]
        while stack and seen < self._max_entries and not self._should_stop():
            directory = stack.pop()
            try:
                device = os.lstat(directory).st_dev
                with os.scandir(directory) as entries:
                    for entry in entries:
                        seen += 1
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(entry.path)
                        elif not entry.is_symlink():
                            counts[(device, entry.inode())] += 1
                        if seen >= self._max_entries:
                            break
            except OSError:
                continue  # an unreadable directory: its links stay uncounted (conservative)
        return counts
