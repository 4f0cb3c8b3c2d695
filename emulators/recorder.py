"""The in-memory log of every request an emulator received, exactly as received."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One request: method, raw path with query, headers in wire order and case, raw body."""

    method: str
    path: str
    headers: tuple[tuple[str, str], ...]
    body: bytes
    timestamp: float
    """Emulator clock time at arrival."""

    def json(self) -> Any:
        """The body decoded as JSON."""
        return orjson.loads(self.body)

    def header(self, name: str) -> str | None:
        """The first value of header ``name`` (case-insensitive), or ``None``."""
        lowered = name.lower()
        return next((v for k, v in self.headers if k.lower() == lowered), None)

    def header_values(self, name: str) -> list[str]:
        """Every value of header ``name`` (case-insensitive), in order."""
        lowered = name.lower()
        return [v for k, v in self.headers if k.lower() == lowered]

    @property
    def path_only(self) -> str:
        """The path without its query string."""
        return self.path.partition("?")[0]


class RequestLog:
    """A bounded, thread-safe, append-only list of :class:`RecordedRequest`."""

    def __init__(self, maxlen: int = 10_000) -> None:
        self._items: deque[RecordedRequest] = deque(maxlen=maxlen)
        self._lock = threading.Lock()

    def append(self, request: RecordedRequest) -> None:
        with self._lock:
            self._items.append(request)

    def snapshot(self) -> list[RecordedRequest]:
        """A copy of the log, oldest first."""
        with self._lock:
            return list(self._items)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def __iter__(self) -> Iterator[RecordedRequest]:
        return iter(self.snapshot())

    def __getitem__(self, index: int) -> RecordedRequest:
        with self._lock:
            return self._items[index]
