"""``GET /v1/models`` query strings go upstream as the client wrote them (issue 13, item 10).

Observed before: the query was decoded and re-encoded, ``%2523`` arrived upstream as ``%23``.
"""

from __future__ import annotations

import pytest

from tests.support.gateway_stack import CLIENT_KEY, Connect, StackFactory
from tests.support.raw_http import request_bytes


@pytest.mark.parametrize(
    "query",
    [
        "after_id=%2523",
        "limit=2&before_id=claude%2Dopus&x=a+b%2Bc",
        "q=%E2%9C%93&empty=&flag",
        "a=%25%32%35&b=%00&c=;/?:@$,",
        "weird=%zz%&%",
    ],
)
def test_the_query_string_is_forwarded_byte_for_byte(
    make_stack: StackFactory, connect: Connect, query: str
) -> None:
    stack = make_stack()
    response = connect(stack).send(request_bytes("GET", f"/v1/models?{query}", [("x-api-key", CLIENT_KEY)]))
    assert response.status == 200, response.body[:300]
    (upstream,) = stack.emulator.requests
    assert upstream.path == f"/v1/models?{query}"


def test_characters_no_url_may_hold_are_percent_encoded(make_stack: StackFactory, connect: Connect) -> None:
    """The HTTP parser lets ``"<>\\^`{|}`` through in a target; they may not stand in a URL as they
    are, so they go upstream escaped, the rest untouched (bytes beyond ASCII never get this far:
    the parser refuses them)."""
    stack = make_stack()
    raw = b'/v1/models?q="a"&r=<b>&s=%2523&t=\\^`{|}'
    response = connect(stack).send(request_bytes("GET", raw, [("x-api-key", CLIENT_KEY)]))
    assert response.status == 200, response.body[:300]
    (upstream,) = stack.emulator.requests
    assert upstream.path == "/v1/models?q=%22a%22&r=%3Cb%3E&s=%2523&t=%5C%5E%60%7B%7C%7D"
