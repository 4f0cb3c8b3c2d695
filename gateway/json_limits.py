"""A request body parsed with its nesting bounded, at C speed, before anything recursive touches it.

A body deeper than ``GATEWAY_MAX_JSON_DEPTH`` is refused, so every later step is safe. The bound is
orjson's own 254-level writer limit, reached by writing the parsed value once inside padding lists:
no Python walk, no copy larger than the body.

Details: docs/internals/gateway.md
"""

from __future__ import annotations

import functools
import threading
from typing import Any, Final

import orjson

MAX_SUPPORTED_DEPTH: Final = 200  # below orjson's 254-level writer, with room for log envelopes
ORJSON_WRITE_DEPTH: Final = 254  # the deepest value orjson.dumps writes
_ORJSON_READ_LIMIT: Final = "depth limit exceeded"  # orjson.loads' message past 1,024 levels


class TooDeep(ValueError):
    """The body nests containers more than the limit."""


def loads_within(body: bytes, limit: int) -> Any:
    """``orjson.loads(body)``; :class:`TooDeep` when it nests more than ``limit`` containers, and
    the body's own ``orjson.JSONDecodeError`` when it is not JSON."""
    if not 1 <= limit <= MAX_SUPPORTED_DEPTH:
        raise ValueError(f"limit must be within 1..{MAX_SUPPORTED_DEPTH}, not {limit}")
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        if is_depth_error(exc):
            raise TooDeep(f"nests more than {limit} levels") from None
        raise
    outer, hole = _padding(ORJSON_WRITE_DEPTH - limit)  # padded, the value passes orjson's writer
    with _padding_lock:  # limit exactly when it nests more than ``limit``
        hole[0] = value
        try:
            orjson.dumps(outer)  # compact: as long as the body, whatever its depth
        except orjson.JSONEncodeError:
            raise TooDeep(f"nests more than {limit} levels") from None
        finally:
            hole[0] = None
    return value


_padding_lock = threading.Lock()


@functools.cache
def _padding(levels: int) -> tuple[list[Any], list[Any]]:
    """``levels`` lists nested in each other (built once per limit) and the innermost one, whose one
    item is where the value goes for the check (building them per request cost ~17 us)."""
    hole: list[Any] = [None]
    outer = hole
    for _ in range(levels - 1):
        outer = [outer]
    return outer, hole


def is_depth_error(error: orjson.JSONDecodeError) -> bool:
    """Whether ``orjson.loads`` refused a document for nesting more than 1,024 levels."""
    return _ORJSON_READ_LIMIT in str(error)
