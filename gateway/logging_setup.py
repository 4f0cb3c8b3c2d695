"""Process-wide logging: one JSON object per line on stderr, ready for a log shipper.

Records are handed to a queue on the event loop's thread and written by a listener thread, so a
slow or blocked stderr pipe never stalls request handling.
"""

from __future__ import annotations

import atexit
import logging
import logging.handlers
import queue
import sys
import time

import orjson


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if message.startswith("{") and record.name == "switchyard.access":
            # already a JSON object: add the envelope fields without re-encoding the payload
            envelope = orjson.dumps(
                {"ts": _iso(record.created), "level": record.levelname, "logger": record.name}
            ).decode()
            return envelope[:-1] + "," + message[1:]
        entry: dict[str, object] = {
            "ts": _iso(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": message,
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(entry).decode()


def _iso(created: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created)) + f".{int(created % 1 * 1000):03d}Z"


_listener: logging.handlers.QueueListener | None = None


def configure_logging(level: str) -> None:
    global _listener
    if _listener is not None:
        _listener.stop()
    records: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
    writer = logging.StreamHandler(sys.stderr)
    writer.setFormatter(JsonFormatter())
    _listener = logging.handlers.QueueListener(records, writer, respect_handler_level=False)
    _listener.start()
    atexit.register(_listener.stop)
    root = logging.getLogger()
    root.handlers[:] = [logging.handlers.QueueHandler(records)]
    root.setLevel(level)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
