"""Canonical JSON of request parts, at C speed: what the prefix hashes are computed over.

Compact JSON with sorted keys and every ``cache_control`` member cut out of the orjson bytes
(moving a breakpoint does not change a prefix). The byte cutting relies on orjson's escaping;
read the proof in the design document before changing it.

Details: docs/internals/gateway-cache.md
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Final

import orjson

MARKER_KEY: Final = b'"cache_control":'
_OPEN_BRACE: Final = 0x7B  # {
_COMMA: Final = 0x2C  # ,
_STRING: Final = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_TOKEN: Final = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)
_SCALAR: Final = re.compile(rb"[^,\]}]*")


def without_markers(value: Any) -> Any:
    """``value`` rebuilt without any ``cache_control`` member (the slow, obvious way)."""
    if isinstance(value, dict):
        return {k: without_markers(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [without_markers(v) for v in value]
    return value


def _value_end(data: bytes, start: int) -> int:
    """Where the JSON value starting at ``data[start]`` ends (orjson's compact output)."""
    first = data[start : start + 1]
    if first == b'"':
        match = _STRING.match(data, start)
        if match is None:
            raise ValueError("unterminated JSON string")
        return match.end()
    if first not in (b"{", b"["):
        scalar = _SCALAR.match(data, start)
        assert scalar is not None  # matches the empty string at worst
        return scalar.end()
    depth = 0
    for token in _TOKEN.finditer(data, start):
        opener = data[token.start()]
        if opener == 0x22:  # a string: brackets inside it do not count
            continue
        depth += 1 if opener in (0x7B, 0x5B) else -1
        if depth == 0:
            return token.end()
    raise ValueError("unterminated JSON value")


def strip_markers(encoded: bytes) -> bytes:
    """``encoded`` (orjson output) without its ``"cache_control"`` members."""
    cut = encoded.find(MARKER_KEY)
    if cut < 0:
        return encoded
    pieces: list[bytes] = []
    kept = 0
    while cut >= 0:
        before = encoded[cut - 1] if cut else 0
        if before not in (_OPEN_BRACE, _COMMA):  # not a key (cannot happen in orjson's output)
            cut = encoded.find(MARKER_KEY, cut + 1)
            continue
        end = _value_end(encoded, cut + len(MARKER_KEY))
        if before == _COMMA:
            start = cut - 1  # `,"cache_control":v` goes with the comma before it
        else:
            start = cut  # `{"cache_control":v,` goes with the comma after it
            if encoded[end : end + 1] == b",":
                end += 1
        pieces.append(encoded[kept : max(start, kept)])
        kept = end
        cut = encoded.find(MARKER_KEY, end)
    pieces.append(encoded[kept:])
    return b"".join(pieces)


def canonical(value: Any) -> bytes:
    """Compact JSON of ``value`` with sorted keys and without ``cache_control`` members."""
    try:
        return strip_markers(orjson.dumps(value, option=orjson.OPT_SORT_KEYS))
    except (orjson.JSONEncodeError, ValueError):
        return orjson.dumps(without_markers(value), option=orjson.OPT_SORT_KEYS)


def digest(*parts: bytes) -> str:
    """The hash every prefix segment is named by: blake2b-80 over the parts, each NUL-terminated."""
    hasher = hashlib.blake2b(digest_size=10)
    for part in parts:
        hasher.update(part)
        hasher.update(b"\x00")
    return hasher.hexdigest()


def as_blocks(message: Any) -> Any:
    """A message whose content is a string, as the single text block the API renders it as (the
    automatic breakpoint turns the one it marks into that block)."""
    if isinstance(message, dict) and isinstance(message.get("content"), str):
        return {**message, "content": [{"type": "text", "text": message["content"]}]}
    return message
