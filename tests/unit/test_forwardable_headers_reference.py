"""``forwardable_request_headers`` (which classifies each header name once and remembers it) agrees
with the rule written plainly: hop-by-hop, credential and recomputed headers and those named by
``Connection`` dropped, order and case kept, ``anthropic-version`` filled in when absent."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.headers import (
    CLIENT_CREDENTIALS,
    DEFAULT_ANTHROPIC_VERSION,
    HOP_BY_HOP,
    RECOMPUTED,
    forwardable_request_headers,
)


def reference(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    named = {
        token.strip().lower()
        for name, value in headers
        if name.lower() == "connection"
        for token in value.split(",")
    }
    drop = HOP_BY_HOP | CLIENT_CREDENTIALS | RECOMPUTED | named
    out = [(name, value) for name, value in headers if name.lower() not in drop]
    if not any(name.lower() == "anthropic-version" for name, _ in out):
        out.append(("anthropic-version", DEFAULT_ANTHROPIC_VERSION))
    return out


NAMES = [
    "Connection", "connection", "Keep-Alive", "X-Api-Key", "authorization", "Host", "Content-Length",
    "anthropic-version", "Anthropic-Version", "anthropic-beta", "x-app", "User-Agent",
    "x-stainless-retry-count", "X-Custom", "x-custom", "Content-Encoding", "TE", "Cookie",
]  # fmt: skip
name = st.one_of(st.sampled_from(NAMES), st.text("abcXY-", min_size=1, max_size=6))
value = st.one_of(
    st.sampled_from(["close", "keep-alive", "x-custom, X-App", " anthropic-version ", "2023-06-01"]),
    st.text("abc ,-", max_size=12),
)


@settings(max_examples=400, deadline=None, derandomize=True)
@given(st.lists(st.tuples(name, value), max_size=12))
def test_agrees_with_the_plain_rule(headers: list[tuple[str, str]]) -> None:
    assert forwardable_request_headers(headers) == reference(headers)
    assert forwardable_request_headers(headers) == reference(headers)  # again, names remembered
