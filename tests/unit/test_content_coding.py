"""Decoding compressed request bodies within limits (gateway.content_coding), chunk by chunk."""

from __future__ import annotations

import gzip
import os
import zlib

import pytest
from multidict import CIMultiDict, CIMultiDictProxy

from gateway.content_coding import OUTPUT_STEP, RATIO_FLOOR, BodyDecoder, content_coding
from gateway.errors import GatewayError

PLAIN = os.urandom(200_000).hex().encode()  # compresses about 2:1


def decode(
    coding: str, data: bytes, *, step: int = 4096, max_bytes: int = 32 << 20, ratio: int = 100
) -> bytes:
    decoder = BodyDecoder(coding, max_bytes, ratio)
    for start in range(0, len(data), step):
        decoder.feed(data[start : start + step])
    return decoder.finish()


def raw_deflate(data: bytes) -> bytes:
    packer = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return packer.compress(data) + packer.flush()


@pytest.mark.parametrize("step", [1, 7, 4096, 1 << 20])
def test_every_supported_form_decodes_in_any_chunking(step: int) -> None:
    assert decode("gzip", gzip.compress(PLAIN), step=step) == PLAIN
    assert decode("gzip", gzip.compress(PLAIN[:999]) + gzip.compress(PLAIN[999:]), step=step) == PLAIN
    assert decode("deflate", zlib.compress(PLAIN), step=step) == PLAIN
    assert decode("deflate", raw_deflate(PLAIN), step=step) == PLAIN


def test_a_highly_compressible_body_inflates_past_one_output_step() -> None:
    body = b"a" * (5 * OUTPUT_STEP + 17)
    assert decode("gzip", gzip.compress(body), ratio=10**6) == body


@pytest.mark.parametrize(
    "coding,data,message",
    [
        ("gzip", b"not gzip at all", "the compressed data is invalid"),
        ("gzip", gzip.compress(PLAIN)[:-9], "the compressed data is truncated"),
        ("gzip", b"", "the compressed body is empty"),
        ("deflate", zlib.compress(PLAIN) + b"\x00", "data after the end of the compressed stream"),
        ("deflate", b"\x78\x9c\xff\xff", "the compressed data is invalid"),
    ],
)
def test_corrupt_data_is_a_400(coding: str, data: bytes, message: str) -> None:
    with pytest.raises(GatewayError) as refused:
        decode(coding, data)
    assert (refused.value.status, refused.value.message) == (
        400,
        f"request body could not be decompressed: {message}",
    )


def test_a_bomb_is_refused_after_reading_little_of_it() -> None:
    """256 MiB of zeros is ~250 KiB of gzip: refused at the ratio cap within the first 64 KiB chunk,
    having inflated at most the cap's worth and one step of it."""
    bomb = gzip.compress(bytes(256 << 20), compresslevel=1)
    decoder = BodyDecoder("gzip", 32 << 20, 100)
    with pytest.raises(GatewayError) as refused:
        for start in range(0, len(bomb), 65536):
            decoder.feed(bomb[start : start + 65536])
    assert refused.value.status == 413 and refused.value.error_type == "request_too_large"
    assert decoder.compressed == 65536  # one chunk read
    assert decoder.decoded <= 100 * 65536 + OUTPUT_STEP  # never more than the cap and one step


def test_the_size_limit_holds_without_a_ratio_cap() -> None:
    with pytest.raises(GatewayError) as refused:
        decode("gzip", gzip.compress(PLAIN), max_bytes=100_000, ratio=10**6)
    assert refused.value.status == 413
    assert refused.value.message == "Request exceeds the maximum allowed number of bytes (100000)."


def test_small_bodies_are_exempt_from_the_ratio() -> None:
    body = b" " * RATIO_FLOOR  # compresses about 1000:1
    assert decode("gzip", gzip.compress(body), ratio=2) == body
    with pytest.raises(GatewayError):
        decode("gzip", gzip.compress(body + b" "), ratio=2)


@pytest.mark.parametrize(
    "values,coding",
    [
        ([], None),
        (["identity"], None),
        (["gzip"], "gzip"),
        ([" X-GZIP "], "gzip"),
        (["Deflate"], "deflate"),
        (["identity, gzip"], "gzip"),
        (["", "gzip"], "gzip"),
    ],
)
def test_the_coding_named_by_the_headers(values: list[str], coding: str | None) -> None:
    headers = CIMultiDictProxy(CIMultiDict([("Content-Encoding", v) for v in values]))
    assert content_coding(headers) == coding


@pytest.mark.parametrize("values", [["br"], ["zstd"], ["gzip, gzip"], ["gzip", "deflate"], ["compress"]])
def test_other_codings_are_415_with_what_is_accepted(values: list[str]) -> None:
    headers = CIMultiDictProxy(CIMultiDict([("Content-Encoding", v) for v in values]))
    with pytest.raises(GatewayError) as refused:
        content_coding(headers)
    assert refused.value.status == 415
    assert refused.value.headers == {"accept-encoding": "gzip, deflate"}
