"""Process-wide logging: one JSON object per line on stderr, ready for a log shipper.

Every line goes through one :class:`~gateway.line_writer.LineWriter`: the access log appends its
pre-serialised lines directly (``gateway.access_log``), every other record (start-up, warnings,
retries: a few per request at most) is formatted on the thread that logged it by
:class:`LineHandler`. One writer thread writes batches to stderr, so a slow or blocked stderr pipe
never stalls request handling, lines are never interleaved mid-line, and what waits is bounded
(beyond the bound lines are dropped and counted in ``gateway_log_lines_dropped_total``).
The writer is flushed at exit (at most ``EXIT_FLUSH_TIMEOUT_S``).
"""

from __future__ import annotations

import atexit
import logging
import sys
from typing import Final

import orjson

from gateway.line_writer import LineWriter, Sink, fd_sink, iso_ts

EXIT_FLUSH_TIMEOUT_S: Final = 2.0


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": iso_ts(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(entry).decode()


def stderr_sink() -> Sink:
    """Writes to the process's stderr file descriptor, or to ``sys.stderr`` when it has none."""
    try:
        return fd_sink(sys.stderr.fileno())
    except (AttributeError, ValueError, OSError):  # replaced by an object without a descriptor

        def write(data: bytes) -> None:
            stream = sys.stderr
            stream.write(data.decode("utf-8", "replace"))
            stream.flush()

        return write


_writer: LineWriter | None = None


def log_writer() -> LineWriter:
    """The process's log writer: the installed one, else one on stderr (made on first use)."""
    global _writer
    writer = _writer
    if writer is None:
        writer = _writer = LineWriter(stderr_sink())
        _flush_at_exit()
    return writer


def install_writer(writer: LineWriter | None) -> LineWriter | None:
    """Make ``writer`` the process's log writer (``None``: a stderr one on next use); returns the
    previous one, which the caller closes. Tests install one with a capturing sink."""
    global _writer
    previous, _writer = _writer, writer
    return previous


def dropped_log_lines() -> int:
    """Lines the process's log writer has dropped (``gateway_log_lines_dropped_total``)."""
    return _writer.dropped if _writer is not None else 0


def flush_logs(timeout_s: float = EXIT_FLUSH_TIMEOUT_S) -> bool:
    """Wait until every line logged so far is written; ``False`` if stderr did not take it in time."""
    return _writer.flush(timeout_s) if _writer is not None else True


class LineHandler(logging.Handler):
    """Formats a record as a JSON line on the logging thread and hands it to the log writer."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(JsonFormatter())

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record).encode() + b"\n"
        except Exception:  # logging must never raise into the caller
            self.handleError(record)
            return
        log_writer().write(line)

    def flush(self) -> None:
        flush_logs()


def _close_at_exit() -> None:
    if _writer is not None:
        _writer.close(EXIT_FLUSH_TIMEOUT_S)


_exit_hook = False


def _flush_at_exit() -> None:
    global _exit_hook
    if not _exit_hook:
        atexit.register(_close_at_exit)
        _exit_hook = True


def configure_logging(level: str) -> None:
    """JSON lines on stderr at ``level`` (``GATEWAY_LOG_LEVEL``; above INFO, no access log)."""
    previous = install_writer(LineWriter(stderr_sink()))
    if previous is not None:
        previous.close(EXIT_FLUSH_TIMEOUT_S)
    _flush_at_exit()
    root = logging.getLogger()
    root.handlers[:] = [LineHandler()]
    root.setLevel(level)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
