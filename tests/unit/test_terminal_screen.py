"""The pseudo-terminal runner the interactive Claude Code tests read screens with
(tests/support/terminal.py): what the small VT100 screen shows for the sequences Ink's renderer
writes, and a real program on a pty read and typed to."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.support.terminal import ENTER, Screen, terminal


def shown(*chunks: bytes, rows: int = 4, cols: int = 20) -> list[str]:
    screen = Screen(rows, cols)
    for chunk in chunks:
        screen.feed(chunk)
    return screen.text().split("\n")


def test_absolute_and_relative_cursor_moves_place_words() -> None:
    # Ink writes words at columns (CHA) and rows (CUP, CUD) instead of spaces and newlines
    lines = shown(b"\x1b[H\r\x1b[1BA\x1b[5Gbrowser\x1b[13Gwindow\r\x1b[2C\x1b[1B\x1b[1mCode:\x1b[22m x")
    assert lines == ["", "A   browser window", "  Code: x", ""]
    assert shown(b"\x1b[3;4Hhere\x1b[1;1Htop") == ["top", "", "   here", ""]


def test_erasing_and_overwriting() -> None:
    assert shown(b"No, exit\r\x1b[Kyes") == ["yes", "", "", ""]
    assert shown(b"abcdef\x1b[3G\x1b[1K") == ["   def", "", "", ""]
    assert shown(b"one\r\ntwo\x1b[2J\x1b[Hthree") == ["three", "", "", ""]
    assert shown(b"one\r\ntwo\x1b[1;2H\x1b[0J") == ["o", "", "", ""]


def test_the_alternate_screen_is_drawn_apart_and_left() -> None:
    assert shown(b"shell$\x1b[?1049h\x1b[2J\x1b[Hdialog") == ["dialog", "", "", ""]
    assert shown(b"shell$\x1b[?1049h\x1b[Hdialog\x1b[?1049l") == ["shell$", "", "", ""]


def test_sequences_and_characters_split_across_reads() -> None:
    marker = "\u276f".encode()
    assert shown(b"\x1b[3", b";2Hx\x1b", b"]8;;http://h\x07link\x1b]8;;\x07", marker[:1], marker[1:]) == [
        "",
        "",
        f" xlink{marker.decode()}",
        "",
    ]


def test_ignored_sequences_draw_nothing() -> None:
    modes = b"\x1b[?2004h\x1b[?1000h\x1b[>4m\x1b[?u\x1b[c\x1b7\x1b[r\x1b8\x1b(B\x0f"
    assert shown(modes + b"\x1b[38;5;174mred\x1b[39m \x1b[7m \x1b[27m") == ["red", "", "", ""]


def test_long_lines_wrap_and_the_bottom_line_scrolls() -> None:
    assert shown(b"0123456789abc", cols=10, rows=2) == ["0123456789", "abc"]
    assert shown(b"a\r\nb\r\nc", rows=2) == ["b", "c"]


async def test_a_program_on_a_pty_is_read_and_typed_to(tmp_path: Path) -> None:
    script = (
        "import sys\nprint('tty', sys.stdin.isatty(), 'name? ', end='', flush=True)\nprint('hi ' + input())\n"
    )
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    async with terminal([sys.executable, "-c", script], env, tmp_path, rows=5, cols=40) as screen:
        await screen.expect(r"tty True name\?", 10)
        screen.send("ada" + ENTER)
        await screen.expect(r"hi ada", 10)
        await screen.process.wait()
    with pytest.raises(AssertionError, match="not on the screen"):
        async with terminal(["sleep", "30"], env, tmp_path) as sleeper:
            await sleeper.expect("never", 0.3)
    assert sleeper.process.returncode is not None  # closed: its process group was ended
