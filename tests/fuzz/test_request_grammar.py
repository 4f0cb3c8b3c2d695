"""Hypothesis over the Messages and count_tokens request grammar, through the gateway to the
emulator: every answer is a non-5xx, Anthropic-shaped when it is an error; the logs stay clean."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.grammar import count_tokens_body, encoded, is_stream, messages_body, plain_json, session_ids
from tests.fuzz.harness import BATCH, Checker, budget
from tests.support.gateway_stack import CLIENT_KEY

TURNS = BATCH  # requests per example: a session's consecutive turns
MESSAGES_EXAMPLES = 500
COUNT_TOKENS_EXAMPLES = 170


def headers(session: str | None) -> list[tuple[str, str]]:
    found = [
        ("x-api-key", CLIENT_KEY),
        ("content-type", "application/json"),
        ("anthropic-version", "2023-06-01"),
    ]
    if session is not None:
        found.append(("x-claude-code-session-id", session))
    return found


def growing(value: Any) -> list[bytes]:
    """A session's history as it grows: the body with its first 1, 2, ... messages (the cache
    step reuses the hashes of the history a session already sent)."""
    messages = value.get("messages") if isinstance(value, dict) else None
    if not isinstance(messages, list) or len(messages) < 2:
        return []
    return [plain_json({**value, "messages": messages[:count]}) for count in range(1, len(messages))]


def test_messages_bodies(checker: Checker) -> None:
    @budget(MESSAGES_EXAMPLES)
    @given(
        turns=st.lists(encoded(messages_body), min_size=TURNS, max_size=TURNS),
        session=st.none() | session_ids,
    )
    def run(turns: list[tuple[bytes, Any]], session: str | None) -> None:
        first = turns[0][1]
        for raw in growing(first):
            checker.post("/v1/messages", raw, headers(session), stream=is_stream(first))
        for raw, value in turns:
            checker.post("/v1/messages", raw, headers(session), stream=is_stream(value))

    run()
    checker.finish(minimum_cases=MESSAGES_EXAMPLES * TURNS)


def test_count_tokens_bodies(checker: Checker) -> None:
    @budget(COUNT_TOKENS_EXAMPLES)
    @given(
        turns=st.lists(encoded(count_tokens_body), min_size=TURNS, max_size=TURNS),
        session=st.none() | session_ids,
    )
    def run(turns: list[tuple[bytes, Any]], session: str | None) -> None:
        for raw, _ in turns:
            checker.post("/v1/messages/count_tokens", raw, headers(session))

    run()
    checker.finish(minimum_cases=COUNT_TOKENS_EXAMPLES * TURNS)
