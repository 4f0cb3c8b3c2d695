"""A program in a pseudo-terminal, read like a user reads its screen (for the interactive Claude
Code CLI: its ``/login`` dialogs are a full-screen Ink UI that needs a TTY).

:class:`Screen` is a small VT100 screen: a grid of cells written by the program's output, with the
cursor moves, erasures, scrolling and the alternate screen that Ink's renderer uses (absolute
``CSI row;col H``, ``CSI n G``, relative ``A/B/C/D``, ``K``/``J``, ``?1049h``, save/restore
cursor); colours, modes, hyperlinks (OSC 8) and terminal queries are read and ignored. Characters
are one cell wide (no wide-glyph tables): enough to read words, not to measure layout.
:class:`Terminal` runs the program on the slave side of ``os.openpty`` in its own session,
collects its output from the event loop (``add_reader``), waits for text on the screen
(:meth:`Terminal.expect`, bounded) and types keys; :meth:`Terminal.close` ends the process group
it started (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import fcntl
import os
import re
import signal
import struct
import termios
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import Final

ENTER: Final = "\r"
UP: Final = "\x1b[A"
DOWN: Final = "\x1b[B"
ESCAPE: Final = "\x1b"

_TOKEN = re.compile(
    r"\x1b\[(?P<csi>[0-9;?<>=]*)[ -/]*(?P<final>[@-~])"  # CSI
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"  # OSC (titles, hyperlinks)
    r"|\x1b[()*+].|\x1bP[^\x1b]*\x1b\\"  # charset designation, DCS
    r"|\x1b(?P<esc>[ -~])"  # two-character escapes (7, 8, M, c, =, >)
    r"|(?P<ctrl>[\x00-\x1f\x7f])"
    r"|(?P<text>[^\x00-\x1f\x7f]+)"
)
_INCOMPLETE = re.compile(r"\x1b(?:\[[0-9;?<>=]*[ -/]*|\][^\x07\x1b]*\x1b?|[()*+P][^\x1b]*)?\Z")


class Screen:
    """What a ``rows`` x ``cols`` terminal shows after the bytes fed so far."""

    def __init__(self, rows: int, cols: int) -> None:
        self.rows, self.cols = rows, cols
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._pending = ""
        self._main: list[list[str]] = self._blank()
        self._alternate: list[list[str]] | None = None
        self.row = self.col = 0
        self._saved = (0, 0)

    def _blank(self) -> list[list[str]]:
        return [[" "] * self.cols for _ in range(self.rows)]

    @property
    def _grid(self) -> list[list[str]]:
        return self._alternate if self._alternate is not None else self._main

    def text(self) -> str:
        return "\n".join("".join(line).rstrip() for line in self._grid)

    def feed(self, data: bytes) -> None:
        buffer = self._pending + self._decoder.decode(data)
        incomplete = _INCOMPLETE.search(buffer)
        cut = incomplete.start() if incomplete else len(buffer)
        buffer, self._pending = buffer[:cut], buffer[cut:]
        for token in _TOKEN.finditer(buffer):
            if token["text"] is not None:
                self._write(token["text"])
            elif token["ctrl"] is not None:
                self._control(token["ctrl"])
            elif token["final"] is not None:
                self._csi(token["csi"], token["final"])
            elif token["esc"] == "7":
                self._saved = (self.row, self.col)
            elif token["esc"] == "8":
                self.row, self.col = self._saved
            elif token["esc"] == "M":
                self.row = max(0, self.row - 1)

    def _write(self, text: str) -> None:
        grid = self._grid
        for char in text:
            if self.col >= self.cols:
                self.col = 0
                self._line_feed()
            grid[self.row][self.col] = char
            self.col += 1

    def _line_feed(self) -> None:
        if self.row == self.rows - 1:
            grid = self._grid
            del grid[0]
            grid.append([" "] * self.cols)
        else:
            self.row += 1

    def _control(self, char: str) -> None:
        if char == "\r":
            self.col = 0
        elif char == "\n":
            self._line_feed()
        elif char == "\b":
            self.col = max(0, self.col - 1)
        elif char == "\t":
            self.col = min(self.cols - 1, (self.col // 8 + 1) * 8)

    def _csi(self, params: str, final: str) -> None:
        if params[:1] in ("?", "<", ">", "="):
            if params in ("?1049", "?47", "?1047") and final in "hl":
                self._alternate = self._blank() if final == "h" else None
            return  # modes, queries, keyboard protocols: nothing to draw
        numbers = [int(part) if part else 0 for part in params.split(";")] if params else []
        first = numbers[0] if numbers else 0
        count = max(first, 1)
        if final == "A":
            self.row = max(0, self.row - count)
        elif final == "B":
            self.row = min(self.rows - 1, self.row + count)
        elif final == "C":
            self.col = min(self.cols - 1, self.col + count)
        elif final == "D":
            self.col = max(0, self.col - count)
        elif final == "G":
            self.col = min(self.cols - 1, count - 1)
        elif final in "Hf":
            column = numbers[1] if len(numbers) > 1 and numbers[1] else 1
            self.row, self.col = min(self.rows - 1, count - 1), min(self.cols - 1, column - 1)
        elif final == "K":
            self._erase_line(first)
        elif final == "J":
            self._erase_screen(first)

    def _erase_line(self, mode: int) -> None:
        line = self._grid[self.row]
        start, end = {0: (self.col, self.cols), 1: (0, self.col + 1)}.get(mode, (0, self.cols))
        line[start:end] = [" "] * (end - start)

    def _erase_screen(self, mode: int) -> None:
        grid = self._grid
        rows = {0: range(self.row + 1, self.rows), 1: range(self.row)}.get(mode, range(self.rows))
        if mode in (0, 1):
            self._erase_line(mode)
        for row in rows:
            grid[row] = [" "] * self.cols


class Terminal:
    """A process on a pseudo-terminal of ``rows`` x ``cols`` and the screen it draws."""

    def __init__(self, process: asyncio.subprocess.Process, master: int, screen: Screen) -> None:
        self.process, self._master, self.screen = process, master, screen
        self._changed = asyncio.Event()
        self.transcript = bytearray()  # every byte the program wrote, for failure reports
        asyncio.get_running_loop().add_reader(master, self._read)

    def _read(self) -> None:
        try:
            data = os.read(self._master, 65536)
        except OSError:  # EIO: the slave side closed (the program exited)
            data = b""
        if not data:
            asyncio.get_running_loop().remove_reader(self._master)
        else:
            self.transcript += data
            self.screen.feed(data)
        self._changed.set()

    def send(self, keys: str) -> None:
        os.write(self._master, keys.encode())

    async def _until(self, check: Callable[[str], bool], timeout_s: float) -> bool:
        """Whether ``check(screen text)`` held within ``timeout_s`` (read on every change)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            self._changed.clear()
            if check(self.screen.text()):
                return True
            remaining = deadline - loop.time()
            if remaining <= 0 or self.process.returncode is not None:
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), min(remaining, 0.5))

    async def expect(self, pattern: str, timeout_s: float) -> re.Match[str]:
        """The first match of ``pattern`` on the screen, waiting up to ``timeout_s`` for it."""
        compiled = re.compile(pattern, re.DOTALL)
        if await self._until(lambda text: compiled.search(text) is not None, timeout_s):
            found = compiled.search(self.screen.text())
            if found:
                return found
        raise AssertionError(
            f"{pattern!r} not on the screen after {timeout_s} s (exit {self.process.returncode}):\n"
            f"{self.screen.text()}"
        )

    async def gone(self, pattern: str, timeout_s: float) -> bool:
        """Whether ``pattern`` left the screen within ``timeout_s``."""
        compiled = re.compile(pattern, re.DOTALL)
        return await self._until(lambda text: compiled.search(text) is None, timeout_s)

    async def close(self) -> None:
        with contextlib.suppress(ValueError, OSError):
            asyncio.get_running_loop().remove_reader(self._master)
        if self.process.returncode is None:
            for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, sig)  # the session (and group) this test started
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.process.wait(), grace)
                    break
        with contextlib.suppress(OSError):
            os.close(self._master)


@contextlib.asynccontextmanager
async def terminal(
    argv: Sequence[str], env: Mapping[str, str], cwd: Path, rows: int = 50, cols: int = 200
) -> AsyncIterator[Terminal]:
    """Run ``argv`` on a new pseudo-terminal; closed (its process group ended) on exit."""
    master, slave = os.openpty()
    try:
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        process = await asyncio.create_subprocess_exec(
            *argv, cwd=str(cwd), env=dict(env), stdin=slave, stdout=slave, stderr=slave,
            start_new_session=True,
        )  # fmt: skip
    except BaseException:
        os.close(master)
        raise
    finally:
        os.close(slave)
    session = Terminal(process, master, Screen(rows, cols))
    try:
        yield session
    finally:
        await session.close()
