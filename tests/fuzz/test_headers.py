"""Hypothesis over request headers: keys (right, wrong, not UTF-8, doubled), content types,
``anthropic-beta`` / ``anthropic-version``, session ids, retry counts, odd custom headers, on every
authenticated endpoint. Header values keep to what an HTTP parser accepts (visible ASCII, tab,
obs-text bytes): malformed HTTP itself is the connection-level corpus's business."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.harness import BATCH, TEAM_KEY, Checker, budget
from tests.support.gateway_stack import CLIENT_KEY
from tests.support.raw_http import request_bytes

HEADER_EXAMPLES = 400
Header = tuple[bytes, bytes]

BODIES = [
    b'{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}',
    b'{"model":"claude-sonnet-4-5","max_tokens":16,"stream":true,"messages":[{"role":"user","content":"hi"}]}',
    b'{"model":"claude-sonnet-4-5","max_tokens":16,"system":[{"type":"text","text":"s",'
    b'"cache_control":{"type":"ephemeral","ttl":"1h","scope":"global"}}],"messages":[{"role":"user","content":"hi"}]}',
    b'{"model":"claude-opus-4-8","messages":[{"role":"user","content":"count me"}]}',
    b"{not json",
]
ENDPOINTS = [
    ("POST", "/v1/messages"),
    ("POST", "/v1/messages"),
    ("POST", "/v1/messages/count_tokens"),
    ("GET", "/v1/models"),
    ("GET", "/v1/sessions/b3a6f3a2-6a4e-4f7e-9d8e-1c2b3a4d5e6f"),
    ("GET", "/metrics"),
]
NOT_UTF8 = [b"\xff\xfe", b"caf\xe9", b"\xc3\x28", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x80"]
KEYS = [CLIENT_KEY.encode(), TEAM_KEY.encode()]
good_auth = st.sampled_from(
    [[(b"x-api-key", key)] for key in KEYS] + [[(b"authorization", b"Bearer " + k)] for k in KEYS]
)
bad_auth = st.one_of(
    st.sampled_from(
        [
            [],
            [(b"x-api-key", b"")],
            [(b"x-api-key", b"sk-wrong")],
            [(b"x-api-key", b"  " + KEYS[0] + b"\t")],
            [(b"x-api-key", b"sk-" + b"k" * 6000)],
            [(b"authorization", b"Bearer")],
            [(b"authorization", b"bearer   " + KEYS[0])],
            [(b"authorization", b"Basic " + KEYS[0])],
            [(b"x-api-key", b"sk-wrong"), (b"x-api-key", KEYS[0])],
            [(b"x-api-key", KEYS[0]), (b"authorization", b"Bearer \xff")],
        ]
    ),
    st.sampled_from(NOT_UTF8).map(lambda raw: [(b"x-api-key", raw)]),
    st.sampled_from(NOT_UTF8).map(lambda raw: [(b"authorization", b"Bearer " + raw)]),
    st.sampled_from(NOT_UTF8).map(lambda raw: [(b"x-api-key", KEYS[0] + raw)]),
)
# seven cases in ten present a right key (so the rest of the request is looked at)
auth = st.tuples(st.sampled_from(range(10)), good_auth, bad_auth).map(lambda t: t[1] if t[0] < 7 else t[2])
visible = st.binary(max_size=24).map(
    lambda raw: bytes(b if 0x20 <= b < 0x7F or b >= 0x80 else 0x61 for b in raw)
)
ascii_value = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=24).map(
    str.encode
)
odd_value = st.one_of(ascii_value, visible, st.sampled_from(NOT_UTF8), st.just(b"\t x \t"))
extra: st.SearchStrategy[Header] = st.one_of(
    st.tuples(
        st.just(b"content-type"),
        st.sampled_from(
            [
                b"application/json",
                b"application/json; charset=utf-8",
                b"text/plain",
                b"application/x-www-form-urlencoded",
                b"multipart/form-data; boundary=x",
                b"application/json; charset=latin-1",
                b"",
                b"*/*",
            ]
        ),
    ),
    st.tuples(
        st.just(b"anthropic-version"),
        st.sampled_from([b"2023-06-01", b"2026-10-21", b"1999-01-01", b""]) | odd_value,
    ),
    st.tuples(
        st.just(b"anthropic-beta"),
        st.sampled_from(
            [
                b"prompt-caching-scope-2026-01-05",
                b"context-1m-2025-08-07,interleaved-thinking-2025-05-14",
                b"extended-cache-ttl-2025-04-11",
                b",,,",
                b"a" * 3000,
                b"x" + b",y" * 300,
                b"oauth-2025-04-20",
            ]
        )
        | odd_value,
    ),
    st.tuples(
        st.sampled_from([b"x-claude-code-session-id", b"x-session-id"]),
        st.sampled_from(
            [
                b"b3a6f3a2-6a4e-4f7e-9d8e-1c2b3a4d5e6f",
                b"s" * 129,
                b"../x",
                b"",
                b"a b",
            ]
        )
        | odd_value,
    ),
    st.tuples(
        st.just(b"x-stainless-retry-count"),
        st.sampled_from([b"0", b"1", b"-1", b"9" * 40, b"1.5", b"x"]) | odd_value,
    ),
    st.tuples(
        st.sampled_from([b"user-agent", b"x-app", b"accept", b"x-stainless-lang", b"x-custom-tenant"]),
        odd_value,
    ),
    st.tuples(
        st.sampled_from([b"connection", b"keep-alive", b"te", b"upgrade", b"proxy-authorization"]),
        st.sampled_from(
            [
                b"keep-alive",
                b"x-custom-tenant",
                b"trailers",
                b"h2c",
                b"Basic Zm9vOmJhcg==",
            ]
        ),
    ),
    st.tuples(st.just(b"x-client-request-id"), odd_value),
    st.tuples(st.just(b"cookie"), odd_value),
)


@dataclass(frozen=True)
class HeaderCase:
    raw: bytes
    api: bool
    stream: bool
    secrets: list[bytes]


def header_case(
    endpoint: tuple[str, str], body: bytes, keys: list[Header], extras: list[Header]
) -> HeaderCase:
    method, path = endpoint
    raw = request_bytes(method, path, [*keys, *extras], body if method == "POST" else None)
    secrets = [value.removeprefix(b"Bearer ").strip() for _, value in keys]
    return HeaderCase(raw, path.startswith("/v1/messages"), b'"stream":true' in body, secrets)


header_cases = st.builds(
    header_case,
    endpoint=st.sampled_from(ENDPOINTS),
    body=st.sampled_from(BODIES),
    keys=auth,
    extras=st.lists(extra, max_size=4, unique_by=lambda header: header[0]),  # no doubled singletons
)


def test_header_variants(checker: Checker) -> None:
    @budget(HEADER_EXAMPLES)
    @given(cases=st.lists(header_cases, min_size=BATCH, max_size=BATCH))
    def run(cases: list[HeaderCase]) -> None:
        for case in cases:
            checker.send(case.raw, api=case.api, stream=case.stream, secrets=case.secrets)

    run()
    checker.finish(minimum_cases=HEADER_EXAMPLES * BATCH)
