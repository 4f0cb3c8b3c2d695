"""A bounded, batching writer of log lines: the request path appends bytes, a thread writes them.

``write`` does no formatting, syscall or thread hand-off per line; blocking writes happen on the
writer thread only. The buffer is bounded: beyond it lines are dropped and counted.

Details: docs/internals/gateway.md
"""

from __future__ import annotations

import os
import select
import threading
import time
from collections.abc import Callable
from typing import Final

import orjson

DEFAULT_LIMIT_BYTES: Final = 4 * 1024 * 1024
DEFAULT_INTERVAL_S: Final = 0.1
NOTICE_LOGGER: Final = "switchyard.log"

Sink = Callable[[bytes], None]


def fd_sink(fd: int) -> Sink:
    """A sink writing whole batches to a file descriptor: partial writes are continued, and if
    someone made it non-blocking (a shared pipe) the writer thread waits until it takes more."""

    def write(data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(fd, view) :]
            except BlockingIOError:
                select.select([], [fd], [])

    return write


_second: tuple[int, str] = (-1, "")


def iso_ts(now: float) -> str:
    """``2025-01-31T12:00:00.123Z`` (UTC, milliseconds truncated): the ``ts`` of every log line."""
    global _second
    whole = int(now)
    second, prefix = _second
    if whole != second:
        prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now))
        _second = (whole, prefix)  # one tuple: a reader on another thread sees a consistent pair
    return f"{prefix}.{int(now % 1 * 1000):03d}Z"


def notice_line(message: str) -> bytes:
    """A warning line about the writer itself, in the log's JSON envelope."""
    entry = {
        "ts": iso_ts(time.time()),
        "level": "WARNING",
        "logger": NOTICE_LOGGER,
        "message": message,
    }
    return orjson.dumps(entry, option=orjson.OPT_APPEND_NEWLINE)


class LineWriter:
    """A bounded buffer of finished lines in front of a (possibly blocking) sink, drained by one
    thread; see the module docstring."""

    def __init__(
        self,
        sink: Sink,
        *,
        limit_bytes: int = DEFAULT_LIMIT_BYTES,
        interval_s: float = DEFAULT_INTERVAL_S,
    ) -> None:
        self.limit_bytes = limit_bytes
        self.interval_s = interval_s
        self.dropped = 0  # lines dropped since start (the buffer was full, or the sink failed)
        self._sink = sink
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)  # the writer waits here for lines
        self._progress = threading.Condition(self._lock)  # flushers wait here for written lines
        self._lines: list[bytes] = []
        self._held = 0  # bytes buffered or being written: what the limit bounds
        self._appended = 0  # lines appended since start (a flush waits for this many)
        self._written = 0  # lines the writer has finished with
        self._flush_to = 0  # the highest ``_appended`` a flusher waits for
        self._dropping = 0  # lines dropped in the current episode (0: not dropping)
        self._closing = False
        self._idle = False  # the writer waits for a line (not on its interval timer)
        self._thread: threading.Thread | None = None

    def write(self, line: bytes) -> None:
        """Append one line (ending in a newline); never blocks on the sink."""
        with self._lock:
            if self._closing:
                self.dropped += 1
                return
            size = len(line)
            if self._held and self._held + size > self.limit_bytes:
                self.dropped += 1
                if not self._dropping:  # said once per episode, beyond the limit by one line
                    self._append(
                        notice_line(
                            f"log output is not keeping up ({self._held} bytes waiting): dropping "
                            "lines until it does (gateway_log_lines_dropped_total counts them)"
                        )
                    )
                self._dropping += 1
                return
            self._append(line)
            if self._idle:  # the writer sleeps until a line comes: this one
                self._idle = False
                self._work.notify()
            elif self._thread is None:
                self._start()
            elif self._held >= self.limit_bytes // 4:
                self._work.notify()  # cut the interval short (no-op while the sink is busy)

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Wait until every line written so far has reached the sink; ``False`` on timeout."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            target = self._appended
            if self._written >= target or self._closing:  # closed: the close's flush was the last
                return self._written >= target
            self._flush_to = max(self._flush_to, target)
            if self._thread is None:
                self._start()
            self._work.notify()
            while self._written < target:
                left = deadline - time.monotonic()
                if left <= 0 or not self._progress.wait(left):
                    return self._written >= target
            return True

    def close(self, timeout_s: float = 5.0) -> bool:
        """Flush, then stop the writer thread; later lines are dropped. ``False`` on timeout."""
        flushed = self.flush(timeout_s)
        with self._lock:
            self._closing = True
            self._work.notify()
            thread = self._thread
        if thread is not None and flushed:
            thread.join(timeout_s)
        return flushed

    @property
    def held_bytes(self) -> int:
        """Bytes buffered or being written (at most ``limit_bytes`` plus one notice)."""
        return self._held

    # -- under the lock ----------------------------------------------------------------------------
    def _append(self, line: bytes) -> None:
        self._lines.append(line)
        self._held += len(line)
        self._appended += 1

    def _start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="switchyard-log-writer", daemon=True)
        self._thread.start()

    def _hurried(self) -> bool:
        return self._closing or self._flush_to > self._written or self._held >= self.limit_bytes // 4

    # -- the writer thread ---------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._hurried():  # let the batch fill; a flush, close or full buffer cuts it short
                    self._work.wait(self.interval_s)
                while not self._lines and not self._closing:  # nothing came: sleep until a line does
                    self._idle = True
                    self._work.wait()
                self._idle = False
                if not self._lines:  # closing, all written
                    return
                lines, self._lines = self._lines, []
            data = b"".join(lines)
            failed = False
            try:
                self._sink(data)
            except Exception:  # stderr closed or gone (or a broken sink): nowhere left to say it
                failed = True
            with self._lock:
                self._held -= len(data)
                self._written += len(lines)
                if failed:
                    self.dropped += len(lines)
                elif self._dropping and self._held < self.limit_bytes // 2:  # room again: episode over
                    dropped, self._dropping = self._dropping, 0
                    self._append(notice_line(f"log output caught up: {dropped} lines were dropped"))
                self._progress.notify_all()
