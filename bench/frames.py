"""Top frames of a py-spy ``raw`` profile (collapsed stacks: ``frame;frame;...;leaf count``).

*Self* is the share of samples in which a frame is the innermost one; *inclusive* the share in
which it appears anywhere on the stack (counted once per sample even when it recurses). Frames are
``function (file:line)``; by default the line is dropped so one function's lines add up.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

_LINE_NO = re.compile(r":\d+\)$")


def frame_key(frame: str, by_line: bool = False) -> str:
    """``func (path:12)`` -> ``func (path)`` unless ``by_line``."""
    return frame if by_line else _LINE_NO.sub(")", frame)


@dataclass
class Profile:
    total: int = 0
    self_samples: Counter[str] = field(default_factory=Counter)
    inclusive: Counter[str] = field(default_factory=Counter)


def parse_raw(lines: Iterable[str], by_line: bool = False) -> Profile:
    """Read raw py-spy output; lines that are not ``stack count`` are ignored."""
    prof = Profile()
    for line in lines:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [frame_key(f, by_line) for f in stack.split(";")]
        prof.total += n
        prof.self_samples[frames[-1]] += n
        for f in set(frames):
            prof.inclusive[f] += n
    return prof


def top(counter: Counter[str], total: int, n: int) -> list[tuple[float, str]]:
    """The ``n`` most frequent frames as (percent of ``total`` samples, frame)."""
    return [(100.0 * c / total, f) for f, c in counter.most_common(n)] if total else []


def format_profile(prof: Profile, n: int = 25, expected_samples: int | None = None) -> str:
    head = f"{prof.total} samples with the GIL held"
    if expected_samples:
        head += f" (~{100.0 * prof.total / expected_samples:.0f}% of {expected_samples} sampling ticks)"
    lines = [head, "", f"top {n} self (innermost frame), % of samples:"]
    lines += [f"  {pct:5.1f}%  {frame}" for pct, frame in top(prof.self_samples, prof.total, n)]
    lines += ["", f"top {n} inclusive (anywhere on the stack), % of samples:"]
    lines += [f"  {pct:5.1f}%  {frame}" for pct, frame in top(prof.inclusive, prof.total, n)]
    return "\n".join(lines)
