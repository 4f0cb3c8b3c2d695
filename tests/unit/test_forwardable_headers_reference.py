"""``forwardable_request_headers`` (which classifies each header name once and remembers it) agrees
with the rule written plainly: hop-by-hop, credential and recomputed headers and those named by
``Connection`` dropped, order and case kept, ``anthropic-version`` filled in when absent; and the
values of the headers the gateway reads, found in the same pass, are what a plain scan finds."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.headers import (
    BETA_HEADER,
    CLIENT_CREDENTIALS,
    DEFAULT_ANTHROPIC_VERSION,
    FALLBACK_SESSION_HEADER,
    HOP_BY_HOP,
    RECOMPUTED,
    RETRY_COUNT_HEADER,
    SESSION_HEADER,
    forwardable_request_headers,
    header_value,
)
from gateway.providers.betas import request_betas
from gateway.retry_budget import ClientRetries
from gateway.session_ids import session_id_of


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


READ_NAMES = [
    "anthropic-beta", "Anthropic-Beta", "x-claude-code-session-id", "X-Claude-Code-Session-Id",
    "x-session-id", "X-Session-Id", "x-stainless-retry-count", "X-Stainless-Retry-Count", "Connection",
]  # fmt: skip
read_value = st.one_of(
    st.sampled_from(["a,b", "0", "2", "sess-1", " x ", "x-session-id", "anthropic-beta, keep-alive"]),
    st.text("ab1 ,-", max_size=8),
)


@settings(max_examples=400, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.one_of(name, st.sampled_from(READ_NAMES)), read_value), max_size=12))
def test_the_headers_read_are_found_in_the_same_pass(headers: list[tuple[str, str]]) -> None:
    """What the forwarding pass finds (betas, session ids, retry count) is what a reader of the
    plain forwarded list finds: no header named by ``Connection``, first values, every beta."""
    forwarded = forwardable_request_headers(headers)
    plain = list(forwarded)
    assert type(plain) is list and plain == reference(headers)
    assert request_betas(forwarded) == request_betas(plain)
    assert forwarded.betas == [v for k, v in plain if k.lower() == BETA_HEADER]
    assert forwarded.retry_count == header_value(plain, RETRY_COUNT_HEADER)
    assert forwarded.session == header_value(plain, SESSION_HEADER)
    assert forwarded.fallback_session == header_value(plain, FALLBACK_SESSION_HEADER)
    for payload in ({}, {"metadata": {"user_id": "user_abc_account_x_session_from-body"}}):
        assert session_id_of(forwarded, payload) == session_id_of(plain, payload)
    assert ClientRetries.from_headers(forwarded) == ClientRetries.from_headers(plain)
