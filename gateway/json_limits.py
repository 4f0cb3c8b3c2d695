"""How deep a parsed request body nests, checked at C speed before anything recursive touches it.

A body deeper than ``GATEWAY_MAX_JSON_DEPTH`` is refused, so every later step is safe. Depth is
measured from ``OPT_INDENT_2`` output, not by a Python walk (the argument is in the design document).

Details: docs/internals/gateway.md
"""

from __future__ import annotations

import functools
import re
from typing import Any, Final

import orjson

MAX_SUPPORTED_DEPTH: Final = 200  # below orjson's 254-level writer, with room for log envelopes
_ORJSON_READ_LIMIT: Final = "depth limit exceeded"  # orjson.loads' message past 1,024 levels


@functools.cache
def _deeper_than(limit: int) -> re.Pattern[bytes]:
    indent = b"\n" + b" " * (2 * limit)
    # after the indent: one more space (a deeper line), or a container opening here, maybe as the
    # value of a member (a key is a JSON string: an escaped quote never ends it)
    return re.compile(re.escape(indent) + rb'(?: |(?:"(?:[^"\\]|\\.)*": )?[\[{])')


def nests_deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` (as ``orjson.loads`` returns it) nests containers more than ``limit`` deep."""
    try:
        text = orjson.dumps(value, option=orjson.OPT_INDENT_2)
    except orjson.JSONEncodeError:  # deeper than orjson writes (254), so than any allowed limit
        return True
    if b"\n" + b" " * (2 * limit) not in text:  # one C search settles nearly every body
        return False
    return _deeper_than(limit).search(text) is not None


def is_depth_error(error: orjson.JSONDecodeError) -> bool:
    """Whether ``orjson.loads`` refused a document for nesting more than 1,024 levels."""
    return _ORJSON_READ_LIMIT in str(error)
