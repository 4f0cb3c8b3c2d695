"""JSON aliases and the canonical encoding the emulator hashes and counts.

Request bodies are decoded with ``orjson`` into plain ``dict``/``list`` trees; the aliases below
name those trees without pretending to a precision the wire format does not have.
"""

from __future__ import annotations

from typing import Any, TypeAlias

import orjson

JSONObject: TypeAlias = dict[str, Any]
"""A decoded JSON object (request bodies, content blocks, stream events)."""


def canonical_json(value: object) -> bytes:
    """Key-sorted, compact JSON: equal values always give equal bytes."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def without_cache_control(value: Any) -> Any:
    """A deep copy of ``value`` with every ``cache_control`` key removed (markers never key a cache)."""
    if isinstance(value, dict):
        return {k: without_cache_control(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [without_cache_control(v) for v in value]
    return value
