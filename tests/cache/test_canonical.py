"""Canonical JSON with markers cut out of the bytes (gateway.cache.canonical) against rebuilding the
value without them first, for any JSON value, including hostile ``cache_control`` values."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.cache.canonical import canonical, strip_markers, without_markers
from tests.cache import reference

# texts that look like JSON structure, markers, escapes and billing headers
TRICKY = st.sampled_from(
    [
        '"cache_control":{',
        ',"cache_control":{"type":"ephemeral"}}',
        '{"cache_control":',
        '"cache_control":',
        "cache_control",
        "\\",
        '\\"',
        '"',
        "{",
        "}",
        "[",
        "]",
        ",",
        ":",
        "é",
        "\u2028",
        "\x00",
        "\n",
        "x-anthropic-billing-header: cch=ab12f;",
    ]
)
TEXT = st.text(max_size=6) | TRICKY | st.lists(TRICKY, max_size=5).map("".join)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=True, allow_infinity=True)
    | TEXT
)
KEYS = (
    st.sampled_from(["cache_control", "type", "text", "content", "a", "zz", "ttl", "cache_controls", ""])
    | TEXT
)
# what orjson cannot encode: only ever inside a marker's value, where the reference drops it
UNENCODABLE = st.sampled_from([2**70, -(2**64) - 1, "\ud800", "a\udfffb"])


def marked(value: dict[str, Any], control: Any) -> dict[str, Any]:
    return {**value, "cache_control": control}


MARKER_VALUES = st.recursive(
    SCALARS | UNENCODABLE,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
    max_leaves=8,
)
JSON = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(KEYS, inner, max_size=4)
        | st.builds(marked, st.dictionaries(KEYS, inner, max_size=3), MARKER_VALUES)
    ),
    max_leaves=16,
)


@settings(max_examples=250, deadline=None)
@given(JSON)
def test_canonical_is_the_json_of_the_value_without_markers(value: Any) -> None:
    assert canonical(value) == reference.canonical(value)


@settings(max_examples=100, deadline=None)
@given(JSON)
def test_cutting_markers_works_on_unsorted_json_too(value: Any) -> None:
    try:
        encoded = orjson.dumps(value)
    except orjson.JSONEncodeError:
        return  # an unencodable marker value: canonical() rebuilds the value (tested above)
    assert strip_markers(encoded) == orjson.dumps(without_markers(value))


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"cache_control": {"type": "ephemeral"}}, {}),
        ({"cache_control": 1, "z": 2}, {"z": 2}),
        ({"a": 1, "cache_control": None}, {"a": 1}),
        ({"a": 1, "cache_control": "}", "z": [{"cache_control": []}]}, {"a": 1, "z": [{}]}),
        # a value whose strings hold quotes, brackets and another marker: the content after it stays
        (
            {"cache_control": {"x": '"}]\\', "cache_control": {"y": "{"}}, "text": "after"},
            {"text": "after"},
        ),
        # a text that mentions a marker is text, not a marker
        (
            {"text": '{"cache_control":{"type":"ephemeral"}}', "c": ',"cache_control":1'},
            {"text": '{"cache_control":{"type":"ephemeral"}}', "c": ',"cache_control":1'},
        ),
        ([{"cache_control": 2**70, "k": "v"}], [{"k": "v"}]),  # orjson cannot encode 2**70
        ({"cache_control": "\ud800", "k": "v"}, {"k": "v"}),  # nor a lone surrogate
    ],
)
def test_markers_are_cut_whatever_they_hold(value: Any, expected: Any) -> None:
    assert canonical(value) == orjson.dumps(expected, option=orjson.OPT_SORT_KEYS)


def test_what_the_reference_cannot_encode_fails_the_same_way() -> None:
    with pytest.raises(orjson.JSONEncodeError):
        reference.canonical({"text": 2**70})
    with pytest.raises(orjson.JSONEncodeError):
        canonical({"text": 2**70})
