"""``search_files``'s regular expressions: RE2, matched line by line, one RE2 call per file.

RE2 only: a pattern RE2 refuses is a ``ToolError``; nothing falls back to Python's ``re``. The
joined multi-line search must never miss a line that matches alone (why it holds, and the
patterns matched line by line instead: the design document).

Details: docs/internals/loop-tools.md
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Callable, Iterator
from typing import Any

import re2

from loop.tools.base import ToolError

_WHOLE_TEXT_ONLY = re.compile(r"\\[Az]|\(\?[a-zA-Z]*-[a-zA-Z]*m")
"""Constructs whose meaning in the joined text differs from their meaning in one line."""
CHECK_EVERY_LINES = 256


def _compile(pattern: str) -> Any:
    options = re2.Options()
    options.log_errors = False  # RE2 would print every refused pattern on stderr
    return re2.compile(pattern, options)


class LineRegex:
    def __init__(self, pattern: str) -> None:
        try:
            self._line = _compile(pattern)
        except re2.error as exc:
            reason = exc.args[0] if exc.args else exc
            detail = reason.decode("utf-8", "replace") if isinstance(reason, bytes) else str(reason)
            raise ToolError(
                f"invalid regular expression {pattern!r}: {detail}. search_files uses RE2 syntax, which "
                r"has no backreferences (\1) and no lookaround ((?=...), (?!...), (?<=...), (?<!...))"
            ) from None
        self._joined: Any = None
        if not _WHOLE_TEXT_ONLY.search(pattern):
            try:
                self._joined = _compile(f"(?m)(?:{pattern})")
            except re2.error:
                self._joined = None

    def matching_lines(self, lines: list[str], expired: Callable[[], bool]) -> Iterator[int]:
        """The indices of the lines the pattern matches, in order; stops once ``expired()``."""
        if self._joined is None:
            for index, line in enumerate(lines):
                if index % CHECK_EVERY_LINES == 0 and expired():
                    return
                if self._line.search(line):
                    yield index
            return
        if not lines:
            return
        data = "\n".join(lines).encode("utf-8")
        starts = list(itertools.accumulate((len(b) + 1 for b in data.split(b"\n")), initial=0))
        position = 0
        while not expired():
            match = self._joined.search(data, position)
            if match is None:
                return
            begin, end = match.span()
            first = bisect.bisect_right(starts, begin) - 1
            last = bisect.bisect_right(starts, max(begin, end - 1)) - 1
            for index in range(first, last + 1):
                if self._line.search(lines[index]):
                    yield index
            if last + 1 >= len(lines):
                return
            position = starts[last + 1]
