"""Hypothesis over arbitrary JSON documents as request bodies: any shape, any key (including the
grammar's own names at the wrong places), deep chains spliced in at the depths around the limit and
beyond, on both API endpoints."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.grammar import DEPTHS, JUNK, TEXTS, plain_json
from tests.fuzz.harness import BATCH, Checker, budget
from tests.support.gateway_stack import CLIENT_KEY

DOCUMENT_EXAMPLES = 170
NAMES = [
    "model",
    "messages",
    "content",
    "role",
    "cache_control",
    "system",
    "tools",
    "type",
    "text",
    "stream",
    "x",
]

documents = st.recursive(
    st.sampled_from(JUNK) | st.sampled_from(TEXTS),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(NAMES), inner, max_size=5),
    max_leaves=15,
)


def chain(depth: int, kind: str) -> Any:
    """``depth`` containers nested in each other, built without recursion."""
    value: Any = []
    for _ in range(depth - 1):
        value = [value] if kind == "list" else {"content": value}
    return value


def document_case(document: Any, deep: tuple[int, str] | None, top: str) -> tuple[bytes, bool]:
    """The request body (and whether it asks for a stream) for a drawn document."""
    body: Any = document
    if top == "object" and not isinstance(body, dict):
        body = {"model": "claude-sonnet-4-5", "max_tokens": 8, "messages": body}
    if deep is not None and isinstance(body, dict):
        depth, kind = deep
        body = {**body, "metadata": chain(min(depth, 250), kind)}  # orjson writes 254 levels
    raw = plain_json(body)
    if deep is not None and deep[0] > 250 and raw.startswith(b"{"):  # deeper still, as bytes
        raw = b'{"deep":' + b"[" * deep[0] + b"]" * deep[0] + b"," + raw[1:]
    return raw, isinstance(body, dict) and body.get("stream") is True


document_cases = st.builds(
    document_case,
    document=documents,
    deep=st.none() | st.tuples(st.sampled_from(DEPTHS), st.sampled_from(["list", "object"])),
    top=st.sampled_from(["object", "object", "object", "as is"]),
)


def test_json_documents(checker: Checker) -> None:
    @budget(DOCUMENT_EXAMPLES)
    @given(
        cases=st.lists(document_cases, min_size=BATCH, max_size=BATCH),
        path=st.sampled_from(["/v1/messages", "/v1/messages/count_tokens"]),
        session=st.booleans(),
    )
    def run(cases: list[tuple[bytes, bool]], path: str, session: bool) -> None:
        headers = [("x-api-key", CLIENT_KEY), ("content-type", "application/json")]
        if session:
            headers.append(("x-claude-code-session-id", "fuzz-documents"))
        for raw, stream in cases:
            checker.post(path, raw, headers, stream=stream)

    run()
    checker.finish(minimum_cases=DOCUMENT_EXAMPLES * BATCH)
