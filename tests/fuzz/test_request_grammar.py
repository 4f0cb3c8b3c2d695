"""Hypothesis over the Messages and count_tokens request grammar, through the gateway to the
emulator: every answer is a non-5xx, Anthropic-shaped when it is an error; the logs stay clean."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.grammar import count_tokens_body, encoded, is_stream, messages_body, session_ids
from tests.fuzz.harness import Checker, budget
from tests.support.gateway_stack import CLIENT_KEY

MESSAGES_CASES = 1600
COUNT_TOKENS_CASES = 500


def headers(session: str | None) -> list[tuple[str, str]]:
    found = [
        ("x-api-key", CLIENT_KEY),
        ("content-type", "application/json"),
        ("anthropic-version", "2023-06-01"),
    ]
    if session is not None:
        found.append(("x-claude-code-session-id", session))
    return found


def test_messages_bodies(checker: Checker) -> None:
    @budget(MESSAGES_CASES)
    @given(case=encoded(messages_body), session=st.none() | session_ids)
    def run(case: tuple[bytes, Any], session: str | None) -> None:
        raw, value = case
        checker.post("/v1/messages", raw, headers(session), stream=is_stream(value))

    run()
    checker.finish(minimum_cases=MESSAGES_CASES)


def test_count_tokens_bodies(checker: Checker) -> None:
    @budget(COUNT_TOKENS_CASES)
    @given(case=encoded(count_tokens_body), session=st.none() | session_ids)
    def run(case: tuple[bytes, Any], session: str | None) -> None:
        raw, _ = case
        checker.post("/v1/messages/count_tokens", raw, headers(session))

    run()
    checker.finish(minimum_cases=COUNT_TOKENS_CASES)
