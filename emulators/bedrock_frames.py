"""An encoder for AWS event-stream frames (botocore ships only the decoder).

Frame layout (all integers big-endian)::

    total_length uint32 | headers_length uint32 | prelude_crc uint32 = crc32(first 8 bytes)
    headers: { name_len uint8 | name | type uint8 | value }*   (strings: type 7, uint16 length)
    payload
    message_crc uint32 = crc32(every preceding byte)

Only string headers are needed by Bedrock's response stream. Bedrock's frames:

* ``chunk``: ``:event-type: chunk``, ``:content-type: application/json``, ``:message-type: event``,
  payload ``{"bytes": base64(one Anthropic stream event as JSON)}``;
* exceptions: ``:exception-type: <camelCase name>``, ``:content-type: application/json``,
  ``:message-type: exception``, payload ``{"message": ...}`` (plus extra members for some types).
"""

from __future__ import annotations

import base64
import struct
from binascii import crc32
from collections.abc import Sequence
from typing import Any, Final

import orjson

STRING_HEADER: Final = 7
MAX_HEADERS_BYTES: Final = 128 * 1024
MAX_PAYLOAD_BYTES: Final = 24 * 1024 * 1024
_PRELUDE: Final = struct.Struct(">II")
_UINT32: Final = struct.Struct(">I")
_UINT16: Final = struct.Struct(">H")


def encode_headers(headers: Sequence[tuple[str, str]]) -> bytes:
    out = bytearray()
    seen: set[str] = set()
    for name, value in headers:
        if name in seen:
            raise ValueError(f"duplicate event-stream header {name!r}")
        seen.add(name)
        raw_name = name.encode("utf-8")
        raw_value = value.encode("utf-8")
        if len(raw_name) > 255 or len(raw_value) > 0xFFFF:
            raise ValueError(f"event-stream header {name!r} is too long")
        out += bytes((len(raw_name),)) + raw_name + bytes((STRING_HEADER,))
        out += _UINT16.pack(len(raw_value)) + raw_value
    return bytes(out)


def encode_frame(headers: Sequence[tuple[str, str]], payload: bytes) -> bytes:
    """One complete frame with both CRCs."""
    raw_headers = encode_headers(headers)
    if len(raw_headers) > MAX_HEADERS_BYTES or len(payload) > MAX_PAYLOAD_BYTES:
        raise ValueError("event-stream frame exceeds the protocol limits")
    prelude = _PRELUDE.pack(12 + len(raw_headers) + len(payload) + 4, len(raw_headers))
    message = prelude + _UINT32.pack(crc32(prelude)) + raw_headers + payload
    return message + _UINT32.pack(crc32(message))


_CHUNK_HEADERS: Final = (
    (":event-type", "chunk"),
    (":content-type", "application/json"),
    (":message-type", "event"),
)


def chunk_frame(event: dict[str, Any]) -> bytes:
    """A ``chunk`` frame carrying one Anthropic stream event."""
    payload = orjson.dumps({"bytes": base64.b64encode(orjson.dumps(event)).decode("ascii")})
    return encode_frame(_CHUNK_HEADERS, payload)


def exception_frame(exception_type: str, message: str, **members: Any) -> bytes:
    """An exception frame (``throttlingException``, ``modelStreamErrorException``...)."""
    headers = (
        (":exception-type", exception_type),
        (":content-type", "application/json"),
        (":message-type", "exception"),
    )
    return encode_frame(headers, orjson.dumps({"message": message, **members}))
