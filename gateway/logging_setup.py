"""Process-wide logging: one JSON object per line on stderr, ready for a log shipper."""

from __future__ import annotations

import logging
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


def configure_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
