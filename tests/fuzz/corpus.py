"""The raw-socket corpus: every class of hostile request issue 13 found, as the bytes sent.

Each :class:`Case` is one whole HTTP/1.1 request and what it must get: a status (``None``: any
non-5xx), and how many upstream requests it may cause. ``test_corpus`` sends them all through one
gateway in front of the emulator and checks every answer as the fuzz harness does (no 5xx, errors in
the Anthropic JSON shape, clean logs, one access line per API request).

The classes, each a function below so a new class is one more function in ``CLASSES``:

* ``deep_json``: bodies nested at the depths the issue probed (the limit and one more, 200, 254-256,
  490, 1,023-1,025, 5,000), in three shapes (arrays in ``metadata``, objects in a tool input,
  ``tool_result`` blocks in each other's content), on both API endpoints, streaming or not;
* ``keys_not_utf8``: ``x-api-key`` / ``Authorization`` bytes that are not UTF-8, on every route;
* ``content_encodings``: gzip, deflate (zlib and raw), corrupt, cut, a bomb, codings not decoded;
* ``models_queries``: ``/v1/models`` query strings that must go upstream byte for byte;
* ``odd_bodies``: empty, whitespace, BOM, not an object, huge numbers, lone surrogates, duplicate
  keys, invalid UTF-8, over the size limit, announced over the size limit;
* ``methods_and_paths``: every method on every route, unknown routes;
* ``continue_and_chunked``: ``Expect: 100-continue``, chunked bodies;
* ``real_clients``: the captured Claude Code and SDK requests (``tests/fixtures/real-clients``),
  with their own headers, as captured and then coded, re-spaced, nested past the limit, with a
  header value that is not UTF-8, with a coding the gateway does not decode.

Malformed HTTP itself (request lines, header syntax the parser refuses, conflicting framing) is for
the connection-level suite: such a request never reaches a handler.
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from tests.support.gateway_stack import CLIENT_KEY
from tests.support.raw_http import request_bytes

LIMIT = 128  # GATEWAY_MAX_JSON_DEPTH's default, which the fuzz gateway runs with
MAX_BODY = 4 * 1024 * 1024  # the fuzz gateway's GATEWAY_MAX_BODY_BYTES
KEY = [("x-api-key", CLIENT_KEY), ("content-type", "application/json")]
SESSION = [*KEY, ("x-claude-code-session-id", "corpus-session")]
HI = b'{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}'
COUNT_HI = b'{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"hi"}]}'
API = ("/v1/messages", "/v1/messages/count_tokens")


@dataclass(frozen=True)
class Case:
    name: str
    request: bytes  # the whole request, as sent on the wire
    status: int | None = None  # the status it must get (None: any non-5xx)
    api: bool = False  # a /v1/messages* request: it leaves one access line
    stream: bool = False  # it asks for a stream (a 200 must be SSE ending in message_stop)
    upstream: int | None = None  # upstream requests it must cause (None: not checked)
    head: bool = False  # a HEAD request: the answer has no body
    reconnect: bool = False  # the request leaves the connection unusable (a body announced, not sent)


def post(name: str, path: str, body: bytes, headers: list[tuple[str, str]] = KEY, **expect: object) -> Case:
    return Case(name, request_bytes("POST", path, headers, body), api=path in API, **expect)  # type: ignore[arg-type]


# -- deep JSON (items 1 and 7) ---------------------------------------------------------------------
DEPTHS = [LIMIT - 1, LIMIT, LIMIT + 1, 200, 254, 255, 256, 490, 1023, 1024, 1025, 5000]


def _deep_body(shape: str, depth: int, count_tokens: bool, stream: bool) -> bytes:
    """A body nesting exactly ``depth`` levels (the body itself is level 1)."""
    head = b'{"model":"claude-sonnet-4-5",' + (b"" if count_tokens else b'"max_tokens":16,')
    head += b'"stream":true,' if stream else b""
    if shape == "metadata":  # body > metadata array > ...: arrays nested depth - 1
        inner = depth - 1
        nest = b"[" * inner + b"]" * inner
        key = b'"metadata":' if not count_tokens else b'"tool_choice":'
        return head + b'"messages":[{"role":"user","content":"hi"}],' + key + nest + b"}"
    if shape == "tool_input":  # body > messages > message > content > tool_use > input: 6 levels
        extra = depth - 6
        nest = b'{"a":' * extra + b"{}" + b"}" * extra
        return (
            head + b'"messages":[{"role":"user","content":"go"},{"role":"assistant","content":['
            b'{"type":"tool_use","id":"toolu_01","name":"t","input":' + nest + b"}]},"
            b'{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_01","content":"ok"}]}]}'
        )
    # tool_result blocks nested: body > messages > message > content, then two levels per block
    levels = max((depth - 5) // 2, 1)
    block = b'{"type":"tool_result","tool_use_id":"toolu_01","cache_control":{"type":"ephemeral"},"content":['
    nest = block * levels + b'{"type":"text","text":"x"}' + b"]}" * levels
    return head + b'"messages":[{"role":"user","content":[' + nest + b"]}]}"


def deep_json() -> Iterator[Case]:
    for shape in ("metadata", "tool_input", "tool_results"):
        for depth in DEPTHS:
            for path in API:
                for stream in (False, True) if path == API[0] else (False,):
                    body = _deep_body(shape, depth, path == API[1], stream)
                    over = depth > LIMIT
                    yield post(
                        f"deep {shape} {depth} {path} stream={stream}",
                        path,
                        body,
                        SESSION,
                        status=400 if over else None,
                        upstream=0 if over else 1,
                        stream=stream,
                    )


# -- keys that are not UTF-8 (item 2) --------------------------------------------------------------
NOT_UTF8 = [
    b"\xff\xfe",
    b"caf\xe9",
    b"\xc3\x28",
    b"\xed\xa0\x80",
    b"\xf4\x90\x80\x80",
    CLIENT_KEY.encode() + b"\x80",
]
ROUTES = [
    ("POST", "/v1/messages"),
    ("POST", "/v1/messages/count_tokens"),
    ("GET", "/v1/models"),
    ("GET", "/v1/sessions/corpus-session"),
    ("GET", "/metrics"),
]


def keys_not_utf8() -> Iterator[Case]:
    for method, path in ROUTES:
        body = (HI if path == API[0] else COUNT_HI) if method == "POST" else None
        for raw in NOT_UTF8:
            for name, value in (
                (b"x-api-key", raw),
                (b"authorization", b"Bearer " + raw),
                (b"authorization", raw),
            ):
                request = request_bytes(method, path, [(name, value)], body)
                label = f"{name.decode()}: {value!r}"
                yield Case(f"key {label} on {method} {path}", request, 401, api=path in API, upstream=0)


# -- Content-Encoding (item 3) ---------------------------------------------------------------------
def _raw_deflate(data: bytes) -> bytes:
    packer = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return packer.compress(data) + packer.flush()


def content_encodings() -> Iterator[Case]:
    bomb = gzip.compress(bytes(64 * 1024 * 1024), compresslevel=9)
    for path, plain in ((API[0], HI), (API[1], COUNT_HI)):
        coded: list[tuple[str, str, bytes, int | None, int | None]] = [
            ("gzip", "gzip", gzip.compress(plain), 200, 1),
            ("x-gzip", "x-gzip", gzip.compress(plain), 200, 1),
            ("deflate", "deflate", zlib.compress(plain), 200, 1),
            ("raw deflate", "deflate", _raw_deflate(plain), 200, 1),
            ("two gzip members", "gzip", gzip.compress(plain[:10]) + gzip.compress(plain[10:]), 200, 1),
            ("identity", "identity", plain, 200, 1),
            ("corrupt gzip", "gzip", b"\x1f\x8b\x08\x00garbage", 400, 0),
            ("cut gzip", "gzip", gzip.compress(plain)[:-8], 400, 0),
            ("gzip labelled deflate", "deflate", gzip.compress(plain), 400, 0),
            ("plain labelled gzip", "gzip", plain, 400, 0),
            ("empty gzip", "gzip", b"", 400, 0),
            ("bomb", "gzip", bomb, 413, 0),
            ("br", "br", plain, 415, 0),
            ("zstd", "zstd", plain, 415, 0),
            ("compress", "compress", plain, 415, 0),
            ("two codings", "gzip, gzip", gzip.compress(gzip.compress(plain)), 415, 0),
            ("unknown", "x-unknown", plain, 415, 0),
        ]
        for name, label, body, status, upstream in coded:
            headers = [*KEY, ("content-encoding", label)]
            yield post(f"{name} on {path}", path, body, headers, status=status, upstream=upstream)
            chunked_headers = [*headers, ("transfer-encoding", "chunked")]
            framed = b"".join(
                b"%x\r\n%s\r\n" % (len(body[i : i + 97]), body[i : i + 97]) for i in range(0, len(body), 97)
            )
            request = request_bytes(
                "POST", path, chunked_headers, framed + b"0\r\n\r\n", content_length=False
            )
            yield Case(f"{name} chunked on {path}", request, status, api=True, upstream=upstream)


# -- /v1/models query strings (item 10) ------------------------------------------------------------
QUERIES = [
    "after_id=%2523",
    "before_id=claude%2Dopus&limit=5",
    "q=a+b%2Bc",
    "q=%E2%9C%93",
    "a=%25%32%35",
    "x=%zz&y=%&z=%2",
    "empty=&flag&=v",
    "path=/a/b?c=d",
    "semi=a;b,c",
    "beta=true",
]


def models_queries() -> Iterator[Case]:
    for query in QUERIES:
        yield Case(f"models ?{query}", request_bytes("GET", f"/v1/models?{query}", KEY[:1]), 200, upstream=1)


# -- odd bodies ------------------------------------------------------------------------------------
ODD_BODIES: list[tuple[str, bytes]] = [
    ("empty", b""),
    ("whitespace", b" \n\t "),
    ("bom", b"\xef\xbb\xbf" + HI),
    ("array", b"[" + HI + b"]"),
    ("string", b'"hi"'),
    ("null", b"null"),
    ("nan", HI[:-1] + b',"temperature":NaN}'),
    ("infinity", HI[:-1] + b',"temperature":1e400}'),
    ("huge integer", HI.replace(b'"max_tokens":16', b'"max_tokens":' + b"9" * 400)),
    ("64-bit edge", HI.replace(b'"max_tokens":16', b'"max_tokens":18446744073709551616')),
    ("lone surrogate", HI.replace(b'"hi"', b'"\\ud800"')),
    ("escaped nul", HI.replace(b'"hi"', b'"\\u0000"')),
    ("duplicate keys", b'{"model":1,' + HI[1:]),
    ("duplicate messages", HI[:-1] + b',"messages":"again"}'),
    ("invalid utf-8", HI.replace(b"hi", b"h\xffi")),
    ("overlong utf-8", HI.replace(b"hi", b"\xc0\xafhi")),
    ("truncated", HI[:-3]),
    ("trailing garbage", HI + b"}}"),
    ("many keys", b"{" + b",".join(b'"k%d":%d' % (i, i) for i in range(20000)) + b"}"),
    ("long string", HI.replace(b'"hi"', b'"' + b"a" * 1_000_000 + b'"')),
    ("unicode escapes", HI.replace(b'"hi"', b'"\\ud83d\\ude00 \\u202e \\ufeff"')),
]


def odd_bodies() -> Iterator[Case]:
    for path in API:
        for name, body in ODD_BODIES:
            yield post(f"{name} on {path}", path, body, SESSION)
        yield post(f"over the size limit on {path}", path, b" " * (MAX_BODY + 1), status=413, upstream=0)
        announced = request_bytes("POST", path, [*KEY, ("content-length", str(MAX_BODY + 1))])
        yield Case(
            f"announced over the limit on {path}", announced, 413, api=True, upstream=0, reconnect=True
        )


# -- methods and paths -----------------------------------------------------------------------------
METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"]
PATHS = [
    "/v1/messages",
    "/v1/messages/count_tokens",
    "/v1/models",
    "/v1/sessions/corpus-session",
    "/v1/sessions/..%2F..%2Fetc",
    "/healthz",
    "/readyz",
    "/metrics",
    "/v1/nope",
    "/",
    "/v1/messages/",
]


def methods_and_paths() -> Iterator[Case]:
    for method in METHODS:
        for path in PATHS:
            body = HI if method in ("POST", "PUT", "PATCH") else None
            yield Case(
                f"{method} {path}",
                request_bytes(method, path, KEY, body),
                api=path in API,
                head=method == "HEAD",
            )


# -- Expect: 100-continue and chunked bodies -------------------------------------------------------
def continue_and_chunked() -> Iterator[Case]:
    for path, body in ((API[0], HI), (API[1], COUNT_HI)):
        yield post(
            f"expect 100-continue on {path}", path, body, [*KEY, ("expect", "100-continue")], status=200
        )
        for size in (1, 7, 4096):
            framed = b"".join(
                b"%x\r\n%s\r\n" % (len(body[i : i + size]), body[i : i + size])
                for i in range(0, len(body), size)
            )
            request = request_bytes(
                "POST",
                path,
                [*KEY, ("transfer-encoding", "chunked")],
                framed + b"0\r\n\r\n",
                content_length=False,
            )
            yield Case(f"chunked by {size} on {path}", request, 200, api=True, upstream=1)


# -- real clients' requests, as captured and varied -------------------------------------------------
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "real-clients"
# not replayed as captured: credentials, and what the HTTP client computes
_DROPPED = frozenset(
    {"x-api-key", "authorization", "connection", "content-length", "accept-encoding", "host"}
)


def _replay(capture: dict[str, Any], name: str) -> Iterator[Case]:
    target: str = capture["raw_path"]
    headers: list[tuple[str, str | bytes]] = [
        (k, v) for k, v in capture["headers"] if k.lower() not in _DROPPED
    ]
    headers.append(("x-api-key", CLIENT_KEY))
    body = orjson.dumps(capture["body"])
    stream = capture["body"].get("stream") is True
    over = body[:-1] + b',"metadata":' + b"[" * LIMIT + b"]" * LIMIT + b"}"  # LIMIT + 1 deep
    variants: list[tuple[str, bytes, list[tuple[str, str | bytes]], int | None, int]] = [
        ("as captured", body, [], 200, 1),
        ("gzip", gzip.compress(body), [("content-encoding", "gzip")], 200, 1),
        ("deflate", zlib.compress(body), [("content-encoding", "deflate")], 200, 1),
        ("re-spaced", json.dumps(capture["body"], indent=1).encode(), [], 200, 1),
        ("nested past the limit", over, [], 400, 0),
        ("a header not UTF-8", body, [("x-app", b"cli\xff")], 400, 0),
        ("br", body, [("content-encoding", "br")], 415, 0),
    ]
    for variant, data, extra, status, upstream in variants:
        request = request_bytes("POST", target, [*headers, *extra], data)
        yield Case(f"{name} {variant}", request, status, api=True, stream=stream, upstream=upstream)


def real_clients() -> Iterator[Case]:
    for path in sorted(FIXTURES.glob("*.json")):
        capture = orjson.loads(path.read_bytes())
        if capture["raw_path"].startswith(API):  # the clouds' captures have their own wire format
            yield from _replay(capture, path.stem)


CLASSES: list[Callable[[], Iterator[Case]]] = [
    deep_json,
    keys_not_utf8,
    content_encodings,
    models_queries,
    odd_bodies,
    methods_and_paths,
    continue_and_chunked,
    real_clients,
]


def corpus() -> list[Case]:
    return [case for make in CLASSES for case in make()]
