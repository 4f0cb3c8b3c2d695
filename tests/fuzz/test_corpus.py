"""The raw-socket corpus (``tests/fuzz/corpus.py``) through the gateway to the emulator."""

from __future__ import annotations

from tests.fuzz.corpus import corpus
from tests.fuzz.harness import Checker

CASES = corpus()


def test_the_corpus_covers_the_issues_classes() -> None:
    names = [case.name for case in CASES]
    assert len(names) == len(set(names)), "case names must be unique"
    assert len(CASES) >= 400
    for needle in (
        "deep tool_results 490",
        "deep metadata 5000",
        "x-api-key: b'\\xff\\xfe'",
        "bomb",
        "models ?after_id=%2523",
    ):
        assert any(needle in name for name in names), needle


def test_every_corpus_case(checker: Checker) -> None:
    failures: list[str] = []
    for case in CASES:
        before = checker.stack.upstream_count
        try:
            answer = checker.send(case.request, api=case.api, stream=case.stream, head=case.head)
        except (AssertionError, OSError) as failed:  # OSError: the connection dropped
            failures.append(f"{case.name}: {failed!r}"[:400])
            checker.connection.close()
            continue
        if case.reconnect:
            checker.connection.close()
        caused = checker.stack.upstream_count - before
        if case.status is not None and answer.status != case.status:
            failures.append(
                f"{case.name}: status {answer.status}, expected {case.status}: {answer.body[:160]!r}"
            )
        if case.upstream is not None and caused != case.upstream:
            failures.append(f"{case.name}: {caused} upstream requests, expected {case.upstream}")
    assert not failures, "\n".join(failures[:30])
    checker.finish(minimum_cases=len(CASES))
