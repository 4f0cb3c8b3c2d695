"""A request body parsed with its nesting bounded, at C speed, before anything recursive touches it.

A body deeper than ``GATEWAY_MAX_JSON_DEPTH`` is refused, so every later step is safe. The bound is
orjson's own depth limit, reached by parsing the body inside padding brackets: no Python walk, no
second pass over the value, no copy larger than the body.

Details: docs/internals/gateway.md
"""

from __future__ import annotations

from typing import Any, Final

import orjson

MAX_SUPPORTED_DEPTH: Final = 200  # below orjson's 254-level writer, with room for log envelopes
ORJSON_READ_DEPTH: Final = 1024  # the deepest document orjson.loads reads
_ORJSON_READ_LIMIT: Final = "depth limit exceeded"  # orjson.loads' message past that depth


class TooDeep(ValueError):
    """The body nests containers more than the limit."""


def loads_within(body: bytes, limit: int) -> Any:
    """``orjson.loads(body)``; :class:`TooDeep` when it nests more than ``limit`` containers, and
    the body's own ``orjson.JSONDecodeError`` when it is not JSON."""
    if not 1 <= limit <= MAX_SUPPORTED_DEPTH:
        raise ValueError(f"limit must be within 1..{MAX_SUPPORTED_DEPTH}, not {limit}")
    pad = ORJSON_READ_DEPTH - limit  # padded, the body reaches orjson's limit exactly at ``limit``
    try:
        value = orjson.loads(b"[" * pad + body + b"]" * pad)
    except orjson.JSONDecodeError as exc:
        if is_depth_error(exc):
            raise TooDeep(f"nests more than {limit} levels") from None
        orjson.loads(body)  # not JSON: its own error, positions as the client sent them
        raise  # (not reached: JSON inside brackets is JSON)
    for _ in range(pad):
        if type(value) is not list or len(value) != 1:  # the body closed a padding bracket itself
            orjson.loads(body)  # so it is not one JSON value: its own error
            raise orjson.JSONDecodeError("not one JSON value", "", 0)  # (not reached either)
        value = value[0]
    return value


def is_depth_error(error: orjson.JSONDecodeError) -> bool:
    """Whether ``orjson.loads`` refused a document for nesting more than 1,024 levels."""
    return _ORJSON_READ_LIMIT in str(error)
