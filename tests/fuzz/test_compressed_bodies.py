"""Hypothesis over compressed request bodies: codings (supported, unknown, several), corruptions
(cut, flipped bytes, garbage after the end, a label that lies), framing (Content-Length or chunked
in random sizes). A coded body that decodes must get the same answer as its plain form, once
upstream; the rest are 400 (corrupt), 413 (too large) or 415 (not decoded) in the Anthropic shape."""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Callable

from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.grammar import WELLFORMED, plain_json
from tests.fuzz.harness import Checker, budget
from tests.support.gateway_stack import CLIENT_KEY
from tests.support.raw_http import request_bytes

COMPRESSED_CASES = 450


def raw_deflate(data: bytes) -> bytes:
    packer = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return packer.compress(data) + packer.flush()


CODERS: dict[str, Callable[[bytes], bytes]] = {
    "gzip": gzip.compress,
    "x-gzip": gzip.compress,
    "deflate": zlib.compress,
    "deflate-raw": raw_deflate,
}
LABELS = {"deflate-raw": "deflate"}
UNSUPPORTED = ["br", "zstd", "compress", "gzip, gzip", "deflate, gzip", "x-bogus", "*"]
# 64 MiB of zeros is 64 KiB of gzip: a bomb (the fuzz gateway allows 4 MiB bodies)
BOMB = gzip.compress(bytes(64 * 1024 * 1024), compresslevel=9)


def chunked(data: bytes, size: int) -> bytes:
    pieces = [data[i : i + size] for i in range(0, len(data), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


def test_compressed_bodies(checker: Checker) -> None:
    @budget(COMPRESSED_CASES)
    @given(
        value=WELLFORMED.messages_body,
        coding=st.sampled_from([*CODERS, *CODERS, "identity", *UNSUPPORTED, "bomb"]),
        corruption=st.sampled_from(["none", "none", "none", "cut", "flip", "garbage", "lie"]),
        at=st.floats(0, 1),
        chunk=st.none() | st.integers(1, 4096),
    )
    def run(value: dict[str, object], coding: str, corruption: str, at: float, chunk: int | None) -> None:
        value = {**value, "stream": False}
        plain = plain_json(value)
        if coding == "bomb":
            coded, label = BOMB, "gzip"
        elif coding in CODERS:
            coded, label = CODERS[coding](plain), LABELS.get(coding, coding)
        else:
            coded, label = plain, coding
        cut = int(at * len(coded))
        if corruption == "cut":
            coded = coded[:cut]
        elif corruption == "flip":
            coded = coded[:cut] + bytes([coded[cut] ^ 0x5A]) + coded[cut + 1 :] if cut < len(coded) else coded
        elif corruption == "garbage":
            coded += b"\x00garbage"
        elif corruption == "lie":
            label = "deflate" if label.endswith("gzip") else "gzip"
        headers = [
            ("x-api-key", CLIENT_KEY),
            ("content-type", "application/json"),
            ("content-encoding", label),
        ]
        if chunk is None:
            raw = request_bytes("POST", "/v1/messages", headers, coded)
        else:
            headers.append(("transfer-encoding", "chunked"))
            raw = request_bytes("POST", "/v1/messages", headers, chunked(coded, chunk), content_length=False)
        before = checker.stack.upstream_count
        answer = checker.send(raw, api=True)
        upstream = checker.stack.upstream_count - before
        assert upstream <= 1  # never several upstream requests for one client request
        if label in UNSUPPORTED:
            assert answer.status == 415, answer.body[:200]
        elif corruption == "none" and coding == "bomb":
            assert answer.status == 413, answer.body[:200]
        elif corruption == "none":  # decodes: the same answer as the plain body gets
            plain_answer = checker.post("/v1/messages", plain, headers[:2])
            assert answer.status == plain_answer.status, (answer.body[:200], plain_answer.body[:200])

    run()
    checker.finish(minimum_cases=COMPRESSED_CASES)
