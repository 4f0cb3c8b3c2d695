"""The depth-bounded parse of request bodies (gateway.json_limits), against a plain reference."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.errors import GatewayError
from gateway.inbound import parse_json_object
from gateway.json_limits import MAX_SUPPORTED_DEPTH, TooDeep, loads_within


def reference_depth(value: Any) -> int:
    """Containers nested in ``value`` (scalars add nothing), without recursion."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            stack.extend((child, level + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


# keys and strings that look like the layout the check reads: quotes, brackets, newlines, indents
tricky_text = st.sampled_from(['a": [', '"', "\\", "\n    [", "  {", "", 'x\\": {', "[]", "{}"]) | st.text(
    max_size=4
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | tricky_text,  # what orjson reads
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(tricky_text, inner, max_size=3),
    max_leaves=40,
)


def nests_deeper_than(value: Any, limit: int) -> bool:
    """What ``loads_within`` says of ``value`` written as a body (and it reads the value back)."""
    body = orjson.dumps(value)
    try:
        parsed = loads_within(body, limit)
    except TooDeep:
        return True
    assert parsed == value
    return False


@settings(max_examples=400, derandomize=True, deadline=None, database=None)
@given(value=json_values, limit=st.integers(min_value=1, max_value=12))
def test_the_check_agrees_with_the_reference(value: Any, limit: int) -> None:
    assert nests_deeper_than(value, limit) == (reference_depth(value) > limit)


def chain(depth: int, *, objects: bool) -> Any:
    value: Any = {} if objects else []
    for _ in range(depth - 1):
        value = {'k"[': value} if objects else [value]
    return value


@pytest.mark.parametrize("objects", [False, True])
@pytest.mark.parametrize("limit", [16, 64, 128, MAX_SUPPORTED_DEPTH])
def test_the_boundary_is_exact(limit: int, objects: bool) -> None:
    assert not nests_deeper_than(chain(limit, objects=objects), limit)
    assert nests_deeper_than(chain(limit + 1, objects=objects), limit)
    assert not nests_deeper_than([1, [2, {"a": "b"}]], 3)
    assert nests_deeper_than([1, [2, {"a": []}]], 3)


@pytest.mark.parametrize("depth", [255, 256, 490, 1023, 1024, 1025, 5000])
def test_bodies_deeper_than_orjson_reads_or_writes_are_too_deep(depth: int) -> None:
    with pytest.raises(TooDeep):
        loads_within(b"[" * depth + b"]" * depth, MAX_SUPPORTED_DEPTH)


@pytest.mark.parametrize(
    "body",
    [b"", b"  ", b"1],[2", b"{}]", b"[{}", b"{} {}", b"\xef\xbb\xbf{}", b"]" * 5, b"[" * 5, b"{\"a\":1}]" * 3],
)
def test_what_is_not_one_json_value_gets_its_own_error(body: bytes) -> None:
    with pytest.raises(orjson.JSONDecodeError) as refused:
        loads_within(body, 16)
    with pytest.raises(orjson.JSONDecodeError) as alone:
        orjson.loads(body)
    assert str(refused.value) == str(alone.value)


@pytest.mark.parametrize("depth", [129, 490, 1023, 1024, 1025, 5000])
def test_parsing_refuses_deep_bodies_as_400(depth: int) -> None:
    body = b'{"a":' + b"[" * (depth - 1) + b"]" * (depth - 1) + b"}"
    with pytest.raises(GatewayError) as refused:
        parse_json_object(body, 128)
    assert refused.value.status == 400
    assert refused.value.message == "request body nests JSON more than 128 levels deep"
    assert parse_json_object(b'{"a":' + b"[" * 127 + b"]" * 127 + b"}", 128)
