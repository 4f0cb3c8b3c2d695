"""Hypothesis strategies over the Messages request grammar, valid and not.

Bodies are built as Python values from the request grammar (model, max_tokens, stream, system,
messages with text / image / document / tool_use / tool_result / thinking blocks, tools with JSON
schemas, tool_choice, metadata, cache_control markers with good and bad TTLs and scopes), every
part of which is sometimes replaced by a value of the wrong type, then written as bytes by an
encoder that is sometimes hostile: duplicate keys, integers beyond 64 bits, ``NaN``, lone
surrogates, invalid UTF-8, a byte-order mark, truncation, trailing garbage, or nesting spliced in
at the depths the issue probed (around the limit, 254/255, 490, 1,023-1,025, 5,000).
"""

from __future__ import annotations

import json
import random
from typing import Any

import orjson
from hypothesis import strategies as st

MODELS = ["claude-sonnet-4-5", "claude-opus-4-8", "claude-haiku-4-5", "claude-3-5-haiku-20241022"]
BILLING = "x-anthropic-billing-header: cc_version=2.1.197.abc; cc_entrypoint=cli; cch=9f3a1;"
DEPTHS = [8, 100, 122, 123, 124, 125, 126, 127, 128, 129, 200, 254, 255, 256, 490, 1023, 1024, 1025, 5000]

# -- scalars (drawn from lists: one choice each, so thousands of cases stay fast) --------------
TEXTS = [
    "",
    " ",
    "hi",
    "Hello, world",
    "\u0000",
    "\ufeff",
    "\u202e",
    "é",
    "\U0001d518\U0001d52b astral \U0001f389",
    "中文",
    '"cache_control":{"type":"ephemeral"}',
    "\\u0000",
    '"quoted" \\ back',
    "line\nbreak\r\n",
    BILLING,
    "x-anthropic-billing-header: cch=zz;",
    "[[nothing:here]]",
    "a" * 3000,
    "</s>\r\n\r\nHTTP/1.1 200 OK",
    "{",
    "]",
    "1e400",
]
JUNK = [
    None,
    True,
    False,
    0,
    -1,
    2**31,
    2**63,
    -(2**63) - 1,
    2**64,
    10**30,
    1.5,
    -0.0,
    1e308,
    5e-324,
    "",
    "x",
    "ü",
    [],
    [None],
    [1, "a", {}],
    {},
    {"type": "text"},
    {"": None},
    {"a": [{"b": [{}]}]},
]


def _mixed_texts(count: int) -> list[str]:
    """Strings of characters from every plane and category (combining marks, right-to-left,
    controls, astral), made once from a fixed seed: drawing one is one choice, not one per
    character, which keeps thousands of cases fast."""
    rng = random.Random(13)
    pools = [
        "abc xyz",
        "\u0301\u0308\u200d",
        "\u05d0\u05d1\u0627\u202e",
        "\t\n\r\x0b\x7f",
        "\U0001f600\U00010348",
        "\u4e2d\u6587\u30ad",
        '\\"/{}[]:,',
        "\ufffd\ufeff\uffff",
    ]
    return ["".join(rng.choice(rng.choice(pools)) for _ in range(rng.randint(1, 12))) for _ in range(count)]


TEXTS += _mixed_texts(40)
text = st.sampled_from(TEXTS)
ints = st.sampled_from([0, 1, 16, -5, 4096, 2**31, 2**63, -(2**63) - 1, 2**64, 10**30]) | st.integers(
    -(2**31), 2**31
)
junk = st.sampled_from(JUNK)


MISSING: Any = object()  # a required field left out

# -- cache_control: the markers every cache step reads ----------------------------------------------
GOOD_CONTROLS = [
    {"type": "ephemeral"},
    {"type": "ephemeral", "ttl": "1h"},
    {"type": "ephemeral", "ttl": "5m"},
    {"type": "ephemeral", "scope": "global"},
    {"type": "ephemeral", "ttl": "1h", "scope": "global"},
]
BAD_CONTROLS = [
    {"type": "ephemeral", "ttl": "2h"},
    {"type": "ephemeral", "ttl": 3600},
    {"type": "persistent"},
    {},
    "x",
]
SOURCES = [
    {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
    {"type": "url", "url": "https://example.invalid/a.png"},
    {"type": "text", "media_type": "text/plain", "data": "a document"},
]
BAD_SOURCES = [{"type": "base64", "media_type": "image/gif", "data": "not base64!"}, {"type": "file"}, {}]
TOOL_INPUTS = [{}, {"command": "ls -la"}, {"a": {"b": [1, {"c": None}]}}, {"": ""}, {"x": "ü" * 50}]
SCHEMAS = [
    {"type": "object"},
    {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
    {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "object", "properties": {}}}}},
    {
        "type": "object",
        "properties": {"x": {"$ref": "#/definitions/d"}},
        "definitions": {"d": {"type": "string"}},
    },
]
session_ids = st.sampled_from(
    ["b3a6f3a2-6a4e-4f7e-9d8e-1c2b3a4d5e6f", "s-1", "", "x" * 200, "../../etc", "ü"]
)


class Grammar:
    """The request grammar's strategies: ``hostile`` ones put wrong types, missing fields and
    unknown fields anywhere; the others keep to the grammar (so most requests reach the model)."""

    def __init__(self, *, hostile: bool) -> None:
        self.hostile = hostile
        controls = st.sampled_from(GOOD_CONTROLS + (BAD_CONTROLS if hostile else []))
        marker = {"cache_control": controls}
        text_ = text if hostile else st.sampled_from([t for t in TEXTS if t.strip()])
        ids = st.sampled_from(
            ["toolu_01", "toolu_02"] + (["", "toolu_ü", "x" * 300, "a b"] if hostile else [])
        )
        sources = st.sampled_from(SOURCES + (BAD_SOURCES if hostile else []))
        text_block = self.obj({"type": st.just("text"), "text": text_}, marker)
        image_block = self.obj({"type": st.just("image"), "source": sources}, marker)
        document_block = self.obj(
            {"type": st.just("document"), "source": sources}, {**marker, "title": text_}
        )
        thinking_block = self.obj(
            {
                "type": st.sampled_from(["thinking", "redacted_thinking"]),
                "thinking": text_,
                "signature": text_,
            }
        )
        tool_use_block = self.obj(
            {
                "type": st.just("tool_use"),
                "id": ids,
                "name": st.sampled_from(["Bash", "Read", "t"]),
                "input": st.sampled_from(TOOL_INPUTS),
            },
            marker,
        )
        # a tool_result inside a tool_result: invalid, and what the recursive code walks
        nested_result = self.obj(
            {"type": st.just("tool_result"), "tool_use_id": ids, "content": st.lists(text_block, max_size=2)},
            marker,
        )
        result_parts = text_block | image_block | (nested_result if hostile else text_block)
        tool_result_block = self.obj(
            {
                "type": st.just("tool_result"),
                "tool_use_id": ids,
                "content": text_ | st.lists(result_parts, max_size=2),
            },
            {**marker, "is_error": st.booleans()},
        )
        block = st.one_of(
            text_block,
            text_block,
            tool_use_block,
            tool_result_block,
            image_block,
            document_block,
            thinking_block,
        )
        if hostile:
            block |= st.sampled_from(
                [{"type": "server_tool_use"}, {"type": "mystery", "x": 1}, {"type": ""}, {}]
            )
        roles = st.sampled_from(["user", "assistant"] + (["system", "tool", ""] if hostile else []))
        message = self.obj({"role": roles, "content": text_ | st.lists(block, min_size=1, max_size=3)})
        if hostile:
            message = self.obj(
                {"role": roles, "content": text_ | st.lists(block, max_size=3)}, {"output_config": junk}
            )
            messages = st.lists(message, max_size=3) | junk
        else:  # user first, then alternating: what the API accepts
            messages = st.lists(message, min_size=1, max_size=3).map(_alternating)
        system_blocks = st.lists(self.obj({"type": st.just("text"), "text": text_}, marker), max_size=2)
        system = (
            text_ | system_blocks | system_blocks.map(lambda rest: [{"type": "text", "text": BILLING}, *rest])
        )
        tool = self.obj(
            {
                "name": st.sampled_from(["Bash", "Read", "t"] + (["", "a" * 200, "é"] if hostile else [])),
                "input_schema": st.sampled_from(SCHEMAS),
            },
            {**marker, "description": text_},
        )
        tool_choice = st.sampled_from([{"type": "auto"}, {"type": "any"}, {"type": "none"}])
        metadata = st.one_of(
            session_ids.map(
                lambda session: {"user_id": json.dumps({"device_id": "d", "session_id": session})}
            ),
            session_ids.map(lambda session: {"user_id": f"user_abc_account_def_session_{session}"}),
        )
        models = st.sampled_from(MODELS) | (text if hostile else st.nothing())
        optional = {
            "stream": st.booleans(),
            "system": system,
            "tools": st.lists(tool, max_size=2),
            "tool_choice": tool_choice,
            "metadata": metadata,
            "temperature": st.sampled_from([0.0, 0.5, 1.0]),
            "stop_sequences": st.lists(text_, max_size=2),
            "cache_control": controls,
        }
        if hostile:
            optional |= {"top_k": ints, "thinking": junk, "context_management": junk}
        self.messages_body = self.obj(
            {
                "model": models,
                "max_tokens": st.integers(1, 64) | (ints if hostile else st.nothing()),
                "messages": messages,
            },
            optional,
        )
        self.count_tokens_body = self.obj(
            {"model": models, "messages": messages},
            {"system": system, "tools": st.lists(tool, max_size=2), "tool_choice": tool_choice},
        )

    def field(self, strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        """A field's value: hostile, now and then one of another type or none at all."""
        if not self.hostile:
            return strategy
        return st.one_of(strategy, strategy, strategy, strategy, junk, st.just(MISSING))

    def obj(
        self, required: dict[str, Any], optional: dict[str, Any] | None = None
    ) -> st.SearchStrategy[dict[str, Any]]:
        """A JSON object: its required fields, some optional ones (and, hostile, unknown ones)."""
        fields = {name: self.field(value) for name, value in required.items()}
        extras = {name: self.field(value) for name, value in (optional or {}).items()}
        if self.hostile:
            extras["unknown_field"] = junk
        return st.fixed_dictionaries(fields, optional=extras).map(
            lambda found: {k: v for k, v in found.items() if v is not MISSING}
        )


def _alternating(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**m, "role": "user" if i % 2 == 0 else "assistant"} for i, m in enumerate(messages)]


HOSTILE = Grammar(hostile=True)
WELLFORMED = Grammar(hostile=False)
messages_body = HOSTILE.messages_body | WELLFORMED.messages_body
count_tokens_body = HOSTILE.count_tokens_body | WELLFORMED.count_tokens_body


# -- encoding --------------------------------------------------------------------------------------
def plain_json(value: Any) -> bytes:
    """Compact JSON; Python's encoder where orjson refuses (integers beyond 64 bits)."""
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:
        return json.dumps(value, separators=(",", ":")).encode()


def _spliced(encoded: bytes, at: int, piece: bytes) -> bytes:
    """``piece`` in place of the first JSON value after position ``at`` (after a ``:``)."""
    colon = encoded.find(b":", at)
    if colon < 0:
        return encoded[:-1] + b',"x":' + piece + b"}"
    end = colon + 1
    return encoded[:end] + piece + b"," + b'"spliced":' + encoded[end:]


ENCODINGS = [
    "compact",
    "compact",
    "compact",
    "compact",
    "spaced",
    "ascii",
    "duplicate",
    "deep",
    "deep",
    "truncate",
    "garbage",
    "bom",
    "bad_utf8",
    "nan",
    "surrogate",
    "big_number",
    "not_object",
    "empty",
]


@st.composite
def encoded(draw: st.DrawFn, body: st.SearchStrategy[Any]) -> tuple[bytes, Any]:
    """``(bytes, value)``: a body from ``body`` written by one of the (hostile) encoders."""
    value = draw(body)
    how = draw(st.sampled_from(ENCODINGS))
    raw = plain_json(value)
    if how == "spaced":
        raw = json.dumps(value, indent=draw(st.sampled_from([None, 1, "\t"]))).encode()
    elif how == "ascii":
        raw = json.dumps(value, ensure_ascii=True).encode()
    elif how == "duplicate":
        raw = (
            b'{"model":' + plain_json(draw(junk)) + b"," + raw[1:]
            if raw.startswith(b"{") and raw != b"{}"
            else raw
        )
    elif how == "deep":
        depth = draw(st.sampled_from(DEPTHS))
        opener, closer = draw(st.sampled_from([(b"[", b"]"), (b'{"a":', b"}")]))
        piece = opener * depth + b"1" + closer * depth
        raw = _spliced(raw, draw(st.integers(0, max(len(raw) - 1, 0))), piece)
    elif how == "truncate":
        raw = raw[: draw(st.integers(0, max(len(raw) - 1, 0)))]
    elif how == "garbage":
        raw = raw + draw(st.sampled_from([b"x", b"}", b"\x00", b" \n", b"{}", b"\xff"]))
    elif how == "bom":
        raw = b"\xef\xbb\xbf" + raw
    elif how == "bad_utf8":
        at = draw(st.integers(0, max(len(raw) - 1, 0)))
        raw = (
            raw[:at] + draw(st.sampled_from([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\x80"])) + raw[at + 1 :]
        )
    elif how == "nan":
        raw = _spliced(
            raw, 0, draw(st.sampled_from([b"NaN", b"Infinity", b"-Infinity", b"1e400", b"-1e999"]))
        )
    elif how == "surrogate":
        raw = _spliced(
            raw, 0, draw(st.sampled_from([b'"\\ud800"', b'"\\udfff x"', b'"\\ud83d"', b'"\\u0000"']))
        )
    elif how == "big_number":
        raw = _spliced(
            raw,
            0,
            draw(
                st.sampled_from([b"1" * 400, b"-0", b"1E+2", b"0.1e-400", b"123456789012345678901234567890"])
            ),
        )
    elif how == "not_object":
        raw = draw(st.sampled_from([b"[]", b"null", b'"text"', b"42", b"[" + raw + b"]"]))
    elif how == "empty":
        raw = draw(st.sampled_from([b"", b" ", b"\n"]))
    return raw, value


def is_stream(value: Any) -> bool:
    return isinstance(value, dict) and value.get("stream") is True
