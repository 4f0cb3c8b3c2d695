"""``search_files``: RE2 patterns (no catastrophic backtracking, RE2-only syntax refused), the
walk's time budget, and a timeout that really stops the worker thread."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import re2
from hypothesis import given, settings
from hypothesis import strategies as st

from loop.deps import SystemClock
from loop.outcome import ToolUse
from loop.tools import PermissionMode, PermissionPolicy
from loop.tools.builtin import Workspace
from loop.tools.builtin.line_regex import LineRegex
from loop.tools.builtin.search_files import SearchFiles
from loop.tools.dispatcher import ToolDispatcher
from loop.tools.registry import ToolRegistry
from tests.loop.test_tool_special_files import run_in_fresh_loop


def dispatcher(tool: SearchFiles, clock: Any, timeout_s: float) -> ToolDispatcher:
    return ToolDispatcher(
        ToolRegistry([tool]),
        clock=clock,
        policy=PermissionPolicy(mode=PermissionMode.BYPASS_PERMISSIONS),
        default_timeout_s=timeout_s,
    )


async def search(root: Path, clock: Any = None, timeout_s: float = 2.0, **tool_input: Any) -> dict[str, Any]:
    tool = SearchFiles(Workspace(root))
    d = dispatcher(tool, clock or SystemClock(), timeout_s)
    return await d.dispatch(ToolUse("toolu_s", "search_files", tool_input), turn=1)


async def test_catastrophic_backtracking_patterns_finish_at_once(tmp_path: Path) -> None:
    (tmp_path / "evil.txt").write_text(("a" * 30 + "b\n") * 2000 + "a" * 100_000 + "b\n")
    (tmp_path / "good.txt").write_text("aaaa\n")
    started = time.monotonic()
    result = await search(tmp_path, timeout_s=2.0, pattern=r"(a+)+$")
    elapsed = time.monotonic() - started
    assert result.get("is_error") is None
    assert result["content"].splitlines() == ["good.txt:1: aaaa"]
    assert elapsed < 1.0, elapsed  # Python's re: 2**30 steps per line, minutes at least
    nested = await search(tmp_path, timeout_s=2.0, pattern=r"^(a|aa)*(a|aa)*(a|aa)*c$")
    assert nested["content"] == "(no matches)"


@pytest.mark.parametrize(("pattern", "construct"), [(r"(a)\1", r"\1"), ("a(?=b)", "(?="), ("(?<!x)y", "(?<")])
async def test_patterns_re2_cannot_run_are_error_results(
    tmp_path: Path, pattern: str, construct: str
) -> None:
    result = await search(tmp_path, pattern=pattern)
    assert result["is_error"] is True
    text = result["content"]
    assert text.startswith(f"invalid regular expression {pattern!r}: ")
    assert construct in text and "RE2 syntax" in text and "no backreferences" in text


async def test_python_style_patterns_re2_supports_work(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("def main():\n    x = 1\nclass Foo:\n")
    result = await search(tmp_path, pattern=r"^(?P<kw>def|class)\s+\w+\b")
    assert result["content"] == "a.py:1: def main():\na.py:3: class Foo:"
    assert (await search(tmp_path, pattern=r"(?i)FOO"))["content"] == "a.py:3: class Foo:"


class TickingClock(SystemClock):
    """Real timers, but ``now()`` moves one second per reading: the walk's budget runs out after
    a known number of checks, whatever the machine's speed."""

    def __init__(self) -> None:
        self.readings = 0
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            self.readings += 1
            return float(self.readings)


async def test_the_walk_stops_at_its_budget_and_reports_partial_results(tmp_path: Path) -> None:
    for index in range(20):
        (tmp_path / f"f{index:02d}.txt").write_text("needle\n")
    clock = TickingClock()
    tool = SearchFiles(Workspace(tmp_path), time_budget_s=5)
    result = await dispatcher(tool, clock, timeout_s=60).dispatch(
        ToolUse("t", "search_files", {"pattern": "needle"}), turn=1
    )
    lines = result["content"].splitlines()
    assert 1 <= len(lines) - 1 < 20
    assert lines[:-1] == [f"f{i:02d}.txt:1: needle" for i in range(len(lines) - 1)]
    assert re.fullmatch(
        r"\(search stopped after its time budget of 5s, \d+ files searched: the results are partial; "
        r"narrow the path or the glob\)",
        lines[-1],
    )
    # the budget is also capped at 3/4 of the call's timeout
    clock = TickingClock()
    capped = await dispatcher(SearchFiles(Workspace(tmp_path)), clock, timeout_s=4).dispatch(
        ToolUse("t", "search_files", {"pattern": "needle"}), turn=1
    )
    assert "time budget of 3s" in capped["content"]


class SlowClock(SystemClock):
    """Every reading of ``now()`` takes 20 ms of the reading thread's time: a walk over many files
    becomes slow, as over a huge tree. ``readings`` shows whether the walk is still going."""

    def __init__(self) -> None:
        self.readings = 0

    def now(self) -> float:
        self.readings += 1
        time.sleep(0.02)
        return time.monotonic()


def test_a_slow_walk_stops_before_the_dispatcher_timeout_and_a_cancelled_one_at_once(tmp_path: Path) -> None:
    for index in range(500):  # over 20 s of walking with the slow clock
        (tmp_path / f"f{index:03d}.txt").write_text("x\n")
    clock = SlowClock()
    results: list[dict[str, Any]] = []

    async def scenario() -> None:
        tool = SearchFiles(Workspace(tmp_path), time_budget_s=600)
        call = ToolUse("t", "search_files", {"pattern": "needle"})
        results.append(await dispatcher(tool, clock, timeout_s=0.4).dispatch(call, turn=1))
        with pytest.raises(TimeoutError):  # cancelled from outside (an aborted run)
            await asyncio.wait_for(dispatcher(tool, clock, timeout_s=600).dispatch(call, turn=1), 0.3)

    elapsed = run_in_fresh_loop(scenario)  # returns once the worker threads have ended
    assert results[0]["content"].startswith("(no matches)\n(search stopped after its time budget of 0.3s")
    assert elapsed < 3.0, elapsed
    readings = clock.readings
    time.sleep(0.1)
    assert clock.readings == readings < 100


_FRAGMENTS = [
    "a",
    "b",
    "ab",
    ".",
    "^",
    "$",
    r"\b",
    r"\B",
    "[^a]",
    r"\s",
    r"\S",
    "a*",
    "b+",
    "(a|b)",
    "x?",
    r"\n",
]
_FLAGS = ["", "(?i)", "(?s)", "(?U)"]
_TEXT = st.text(alphabet="abAB \t\n\r\x0b\x0c\u2028é", max_size=40)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    flags=st.sampled_from(_FLAGS),
    fragments=st.lists(st.sampled_from(_FRAGMENTS), min_size=1, max_size=4),
    text=_TEXT,
)
def test_one_call_per_file_finds_exactly_the_lines_a_per_line_search_finds(
    flags: str, fragments: list[str], text: str
) -> None:
    pattern = flags + "".join(fragments)
    lines = text.splitlines()
    options = re2.Options()
    options.log_errors = False
    oracle = re2.compile(pattern, options)
    expected = [i for i, line in enumerate(lines) if oracle.search(line)]
    assert list(LineRegex(pattern).matching_lines(lines, lambda: False)) == expected


@pytest.mark.parametrize("pattern", [r"\Aa", r"a\z", "(?-m)^a", "(?i-m:^b)"])
def test_whole_text_anchors_still_mean_the_line(pattern: str) -> None:
    lines = ["xa", "a", "ba", "b"]
    options = re2.Options()
    options.log_errors = False
    oracle = re2.compile(pattern, options)
    expected = [i for i, line in enumerate(lines) if oracle.search(line)]
    assert expected and list(LineRegex(pattern).matching_lines(lines, lambda: False)) == expected
