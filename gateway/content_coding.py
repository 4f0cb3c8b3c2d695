"""Compressed request bodies (``Content-Encoding``): decoded as they arrive, within limits.

Decompression is streamed in bounded steps with the size and ratio limits checked after each, so
a zip bomb is refused after bounded work; the header is never forwarded upstream.

Details: docs/internals/gateway.md
"""

from __future__ import annotations

import zlib
from typing import Final

from multidict import MultiMapping

from gateway.errors import GatewayError

OUTPUT_STEP: Final = 256 * 1024
RATIO_FLOOR: Final = 64 * 1024
# gzip members one body may hold (RFC 1952 allows several; clients send one): each costs a new
# inflater and a copy of the rest of its chunk, so a body of empty 20-byte members cost seconds
MAX_GZIP_MEMBERS: Final = 64
_GZIP: Final = "gzip"
_DEFLATE: Final = "deflate"
_CODINGS: Final = {"gzip": _GZIP, "x-gzip": _GZIP, "deflate": _DEFLATE}
ACCEPTED: Final = "gzip, deflate"


def content_coding(headers: MultiMapping[str]) -> str | None:
    """The body's one content coding (``gzip`` or ``deflate``), ``None`` for an uncoded body."""
    values = headers.getall("content-encoding", ())
    codings = [token.strip().lower() for value in values for token in value.split(",") if token.strip()]
    codings = [c for c in codings if c != "identity"]
    if not codings:
        return None
    if len(codings) > 1:
        raise _unsupported("more than one Content-Encoding is not supported")
    coding = _CODINGS.get(codings[0])
    if coding is None:
        raise _unsupported("unsupported Content-Encoding")
    return coding


def _unsupported(what: str) -> GatewayError:
    return GatewayError(
        415,
        f"{what}: send the request body uncompressed, or compressed with gzip or deflate",
        headers={"accept-encoding": ACCEPTED},
    )


def too_large(max_bytes: int) -> GatewayError:
    """The 413 of a body refused before all of it was read: the connection cannot carry another
    request (the rest of the body is still to come), so the answer says it closes."""
    return GatewayError(
        413,
        f"Request exceeds the maximum allowed number of bytes ({max_bytes}).",
        error_type="request_too_large",
        headers={"connection": "close"},
    )


class BodyDecoder:
    """Inflates one coded body fed chunk by chunk (``feed``), then returns it (``finish``)."""

    def __init__(self, coding: str, max_bytes: int, max_ratio: int) -> None:
        self._coding = coding
        self._max_bytes = max_bytes
        self._max_ratio = max_ratio
        self._inflater: zlib._Decompress | None = None
        self._parts: list[bytes] = []
        self._members = 0
        self.compressed = 0  # coded bytes received
        self.decoded = 0  # bytes inflated so far

    def _new_inflater(self, first: bytes) -> zlib._Decompress:
        if self._coding == _GZIP:
            return zlib.decompressobj(16 + zlib.MAX_WBITS)
        # RFC 9110 "deflate" is the zlib format (RFC 1950: compression method 8 in the low nibble
        # of the first byte); some clients send a raw deflate stream instead, accepted too
        raw = bool(first) and first[0] & 0x0F != 8
        return zlib.decompressobj(-zlib.MAX_WBITS if raw else zlib.MAX_WBITS)

    def feed(self, chunk: bytes) -> None:
        self.compressed += len(chunk)
        if self.compressed > self._max_bytes:
            raise too_large(self._max_bytes)
        data = chunk
        while data:
            inflater = self._inflater
            if inflater is None or inflater.eof:
                if inflater is not None and self._coding != _GZIP:  # gzip may hold several members
                    raise _corrupt("data after the end of the compressed stream")
                self._members += 1
                if self._members > MAX_GZIP_MEMBERS:
                    raise _corrupt(f"more than {MAX_GZIP_MEMBERS} gzip members")
                inflater = self._inflater = self._new_inflater(data)
            out = self._inflate(inflater, data)
            # inflate what the output bound held back (input, or output zlib still holds)
            while not inflater.eof and (inflater.unconsumed_tail or len(out) == OUTPUT_STEP):
                out = self._inflate(inflater, inflater.unconsumed_tail)
            data = inflater.unused_data

    def _inflate(self, inflater: zlib._Decompress, data: bytes) -> bytes:
        try:
            out = inflater.decompress(data, OUTPUT_STEP)
        except zlib.error:
            raise _corrupt("the compressed data is invalid") from None
        self._take(out)
        return out

    def _take(self, out: bytes) -> None:
        if out:
            self.decoded += len(out)
            check_inflated(self.decoded, self.compressed, self._max_bytes, self._max_ratio)
            self._parts.append(out)

    def finish(self) -> bytes:
        inflater = self._inflater
        if inflater is None:
            raise _corrupt("the compressed body is empty")
        if not inflater.eof:
            raise _corrupt("the compressed data is truncated")
        return b"".join(self._parts)


def check_inflated(decoded: int, compressed: int, max_bytes: int, max_ratio: int) -> None:
    """413 when ``decoded`` bytes inflated from ``compressed`` ones break a limit."""
    if decoded > max_bytes:
        raise too_large(max_bytes)
    if decoded > RATIO_FLOOR and decoded > max_ratio * compressed:
        raise GatewayError(
            413,
            f"the compressed request body inflates more than {max_ratio} times its size",
            error_type="request_too_large",
        )


def _corrupt(what: str) -> GatewayError:
    return GatewayError(400, f"request body could not be decompressed: {what}")
