"""Hypothesis over request targets: ``/v1/models`` query strings (which must reach the upstream
byte for byte), session ids in ``/v1/sessions/{id}``, methods on every route, unknown paths. The
target keeps to the bytes an HTTP parser accepts (malformed request lines are the connection-level
corpus's business)."""

from __future__ import annotations

import string

from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.harness import Checker, budget
from tests.support.gateway_stack import CLIENT_KEY
from tests.support.raw_http import request_bytes

PATH_CASES = 450
# what a query may hold as it is (RFC 3986), and escapes, valid or not
QUERY_CHARS = string.ascii_letters + string.digits + "-._~!$&'()*+,;=:@/?"
escapes = st.sampled_from(["%2523", "%23", "%2F", "%00", "%E2%9C%93", "%zz", "%", "%2", "+", "%20", "%25"])
queries = st.lists(st.text(alphabet=QUERY_CHARS, min_size=1, max_size=6) | escapes, max_size=8).map("".join)
# accepted by the parser but not as they are in a URL: the gateway percent-encodes these
ODD = ['"', "<", ">", "\\", "^", "`", "{", "|", "}"]
segments = st.text(alphabet=string.ascii_letters + string.digits + "-._~%:@!$&'()*+,;=", max_size=12)
ROUTES = [
    "/v1/messages",
    "/v1/messages/count_tokens",
    "/v1/models",
    "/v1/sessions/x",
    "/healthz",
    "/readyz",
    "/metrics",
    "/v1/messages/batches",
    "/v1/complete",
    "/",
    "/v1/sessions/",
    "/v1//messages",
    "/v1/messages/../models",
]


def test_models_query_strings_go_upstream_unchanged(checker: Checker) -> None:
    @budget(PATH_CASES // 2)
    @given(query=queries, odd=st.lists(st.sampled_from(ODD), max_size=2))
    def run(query: str, odd: list[str]) -> None:
        target = "/v1/models?" + query + "".join(odd)
        before = len(checker.stack.emulator.requests)
        answer = checker.send(request_bytes("GET", target, [("x-api-key", CLIENT_KEY)]), api=False)
        assert answer.status == 200, answer.body[:200]
        recorded = checker.stack.emulator.requests[before:]
        assert len(recorded) == 1
        sent = recorded[0].path.partition("?")[2]
        expected = query + "".join(f"%{ord(c):02X}" for c in odd)
        assert sent == expected, (target, recorded[0].path)

    run()
    checker.finish(minimum_cases=PATH_CASES // 2)


def test_methods_paths_and_session_ids(checker: Checker) -> None:
    @budget(PATH_CASES // 2)
    @given(
        method=st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD", "TRACE"]),
        path=st.sampled_from(ROUTES) | segments.map(lambda s: "/v1/sessions/" + s),
        authenticated=st.booleans(),
    )
    def run(method: str, path: str, authenticated: bool) -> None:
        headers = [("x-api-key", CLIENT_KEY)] if authenticated else []
        body = b'{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}'
        raw = request_bytes(method, path, headers, body if method in ("POST", "PUT", "PATCH") else None)
        checker.send(raw, api=path in ("/v1/messages", "/v1/messages/count_tokens"), head=method == "HEAD")

    run()
    checker.finish(minimum_cases=PATH_CASES // 2)
