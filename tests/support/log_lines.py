"""The gateway's log output as a test sees it: a real ``LineWriter`` whose sink keeps the bytes.

Installed for every test by the ``log_lines`` fixture (``tests/conftest.py``): the access log and
everything ``configure_logging`` would send to stderr go through the same buffer and writer thread
as in production, into memory instead of a file descriptor.
"""

from __future__ import annotations

import threading
from typing import Any

import orjson

from gateway.access_log import ACCESS_LOGGER
from gateway.line_writer import LineWriter


class LogLines:
    def __init__(self, **writer_options: Any) -> None:
        self._chunks: list[bytes] = []
        self._lock = threading.Lock()
        self.writer = LineWriter(self._sink, **writer_options)

    def _sink(self, data: bytes) -> None:  # the writer thread
        with self._lock:
            self._chunks.append(data)

    def raw(self) -> bytes:
        """Every byte written so far (after a flush of what is buffered)."""
        assert self.writer.flush(10), "the log writer did not flush within 10 s"
        with self._lock:
            return b"".join(self._chunks)

    def records(self) -> list[dict[str, Any]]:
        """Every line as its JSON object; a line that is not one JSON object fails the test."""
        parsed = []
        for line in self.raw().splitlines():
            value = orjson.loads(line)
            assert isinstance(value, dict), line
            parsed.append(value)
        return parsed

    def access(self) -> list[dict[str, Any]]:
        """The access lines (``logger`` ``switchyard.access``), envelope fields included."""
        return [record for record in self.records() if record.get("logger") == ACCESS_LOGGER]

    def text(self) -> str:
        return self.raw().decode()
