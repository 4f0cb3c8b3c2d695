"""How deep a parsed request body nests, checked at C speed before anything recursive touches it.

Everything the gateway does with a client's JSON after parsing it may recurse on its depth:
``orjson.dumps`` (prefix hashes, the access log's ``request_body``, a reshaped body) refuses more
than 254 levels, the cache step's Python walks recurse once per nested block. ``orjson.loads``
itself refuses more than 1,024 levels (``depth limit exceeded``). So a body is refused unless it
nests at most ``GATEWAY_MAX_JSON_DEPTH`` levels (at most ``MAX_SUPPORTED_DEPTH``), and within that
bound every later step is safe.

Depth counts containers: ``{}`` is 1 deep, ``{"a": [1]}`` 2 deep (scalars add nothing), as
``orjson`` and ``serde_json`` count it. It is measured without walking the value in Python: the
value is written once with ``OPT_INDENT_2``, where every array item and object member sits on its
own line indented two spaces per enclosing container (a string never holds a raw newline: it is
escaped). A container at depth ``d`` therefore starts a line indented ``2 * (d - 1)`` (alone, or as
a member's value after ``"key": ``), and its items are indented ``2 * d``; so the value is deeper
than ``limit`` exactly when a line is indented more than ``2 * limit`` (inside a container at depth
``limit + 1``) or indented ``2 * limit`` and opening a container (an empty one at ``limit + 1``).
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
