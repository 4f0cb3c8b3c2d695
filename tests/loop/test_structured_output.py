"""Structured output: the final answer validated against a pydantic model, retried with the
errors fed back, a distinct terminal when the retries run out."""

from __future__ import annotations

from typing import Annotated, Any

import orjson
import pytest
from pydantic import BaseModel, Field

import loop
from loop.callers import SdkModelCaller
from loop.state import LoopState
from loop.structured import OutputSpec, check_output, extract_json, strict_schema
from loop.testing import FakeModel, FakeResponse, VirtualClock, text
from loop.transitions import (
    Completed,
    StructuredOutputInvalid,
    StructuredOutputRetry,
    describe,
)
from tests.loop.support import pairing_violations, run_to_end
from tests.support.loop_stack import GATEWAY_KEY, LoopStack


class Verdict(BaseModel):
    label: str
    score: Annotated[int, Field(ge=0, le=10)]


def _state(retries_used: int) -> LoopState:
    transitions = tuple(StructuredOutputRetry(n, "e") for n in range(1, retries_used + 1))
    return LoopState(messages=(), started_at=0.0, transitions=transitions)


SPEC = OutputSpec(Verdict, retries=2)


@pytest.mark.parametrize(
    ("answer", "used", "expected"),
    [
        ('{"label": "ok", "score": 3}', 0, None),
        ('{"label": "ok", "score": 3}', 2, None),
        (
            '{"label": "ok", "score": 11}',
            0,
            StructuredOutputRetry(1, "score: Input should be less than or equal to 10"),
        ),
        ('{"label": "ok"}', 1, StructuredOutputRetry(2, "score: Field required")),
        (
            "not json",
            2,
            StructuredOutputInvalid(3, "(root): Invalid JSON: expected ident at line 1 column 2"),
        ),
    ],
)
def test_check_output_table(answer: str, used: int, expected: Any) -> None:
    checked = check_output(_state(used), [{"type": "text", "text": answer}], SPEC)
    assert checked.decision == expected
    if expected is None:
        assert isinstance(checked.value, Verdict)
    else:
        assert checked.value is None


def test_zero_retries_gives_up_at_once() -> None:
    checked = check_output(_state(0), [{"type": "text", "text": "{}"}], OutputSpec(Verdict, retries=0))
    assert isinstance(checked.decision, StructuredOutputInvalid) and checked.decision.attempts == 1


@pytest.mark.parametrize(
    ("text_", "expected"),
    [
        ('  {"a": 1} ', '{"a": 1}'),
        ('Here it is:\n```json\n{"a": 1}\n```\nDone.', '{"a": 1}'),
        ('first ```json\n{"a": 0}\n``` then ```\n{"a": 2}\n```', '{"a": 2}'),
        ('The answer is {"a": {"b": 1}} as asked.', '{"a": {"b": 1}}'),
        ("[1, 2]", "[1, 2]"),
        ("no json here", "no json here"),
    ],
)
def test_extract_json(text_: str, expected: str) -> None:
    assert extract_json(text_) == expected


def test_the_native_schema_is_the_subset_json_outputs_accept() -> None:
    class Inner(BaseModel):
        tags: Annotated[list[str], Field(min_length=2)]
        email: Annotated[str, Field(pattern=r".+@.+", json_schema_extra={"format": "email"})]

    class Outer(BaseModel):
        """An outer value."""

        inner: Inner
        count: Annotated[int, Field(ge=1, description="How many.")]
        ip: Annotated[str, Field(json_schema_extra={"format": "ipv4"})]

    schema = strict_schema(Outer.model_json_schema())
    assert schema["additionalProperties"] is False
    assert schema["$defs"]["Inner"]["additionalProperties"] is False
    assert schema["properties"]["count"] == {
        "description": "How many.\n\n{minimum: 1}",
        "title": "Count",
        "type": "integer",
    }
    tags = schema["$defs"]["Inner"]["properties"]["tags"]
    assert "minItems" not in tags and tags["description"] == "{minItems: 2}"
    email = schema["$defs"]["Inner"]["properties"]["email"]
    assert email["format"] == "email" and "pattern" not in email
    assert schema["properties"]["ip"]["format"] == "ipv4"


def _run(responses: list[FakeResponse], output: Any, **kwargs: Any) -> tuple[loop.Run, FakeModel]:
    clock = VirtualClock()
    model = FakeModel(responses, clock=clock)
    params = loop.QueryParams(
        "rate this",
        system="You rate things.",
        deps=loop.LoopDeps(call_model=model, clock=clock),
        output_type=output,
        **kwargs,
    )
    return loop.query(params), model


async def test_a_valid_answer_is_the_runs_output_and_the_request_asks_for_json_outputs() -> None:
    run, model = _run([FakeResponse.of(text('{"label": "good", "score": 8}'))], Verdict)
    await run_to_end(run)
    assert run.terminal == Completed("end_turn")
    assert run.output == Verdict(label="good", score=8)
    body = model.requests[0].body
    fmt = body["output_config"]["format"]
    assert fmt["type"] == "json_schema" and fmt["schema"]["required"] == ["label", "score"]
    assert body["system"][-1]["text"] == "You rate things."  # native: nothing added to the prompt


async def test_an_invalid_answer_is_retried_with_the_errors_fed_back() -> None:
    run, model = _run(
        [
            FakeResponse.of(text('{"label": "good", "score": 80}')),
            FakeResponse.of(text('{"label": "good", "score": 8}')),
        ],
        Verdict,
    )
    await run_to_end(run)
    assert run.terminal == Completed("end_turn")
    assert run.output == Verdict(label="good", score=8)
    (retry,) = run.state.transitions
    assert retry == StructuredOutputRetry(1, "score: Input should be less than or equal to 10")
    feedback = model.requests[1].body["messages"][-1]["content"][0]["text"]
    assert "score: Input should be less than or equal to 10" in feedback
    assert [m["role"] for m in run.messages] == ["user", "assistant", "user", "assistant"]
    assert pairing_violations(run.messages) == []


async def test_retries_are_bounded_and_end_with_their_own_terminal() -> None:
    run, model = _run(
        [FakeResponse.of(text("I think it is good.")) for _ in range(3)], OutputSpec(Verdict, retries=2)
    )
    await run_to_end(run)
    assert isinstance(run.terminal, StructuredOutputInvalid)
    assert run.terminal.attempts == 3 and len(model.requests) == 3
    assert run.output is None
    assert describe(run.terminal)["reason"] == "structured_output_invalid"


async def test_prompted_mode_states_the_schema_in_the_system_prompt_and_parses_fenced_json() -> None:
    run, model = _run(
        [FakeResponse.of(text('Sure.\n```json\n{"label": "meh", "score": 5}\n```'))],
        OutputSpec(Verdict, native=False),
    )
    await run_to_end(run)
    assert run.output == Verdict(label="meh", score=5)
    body = model.requests[0].body
    assert "output_config" not in body
    assert '"required":["label","score"]' in body["system"][-1]["text"]


async def test_json_outputs_through_the_gateway_and_the_emulator(stack: LoopStack) -> None:
    async with SdkModelCaller(stack.gateway_url, GATEWAY_KEY, max_retries=0) as sdk:
        run = loop.query(
            loop.QueryParams("rate the weather", deps=loop.LoopDeps(call_model=sdk), output_type=Verdict)
        )
        await run_to_end(run)
    assert run.terminal == Completed("end_turn")
    assert run.output == Verdict(label="label example", score=1)  # the emulator's instance of the schema
    (body,) = [orjson.loads(r.body) for r in stack.emulator.requests if r.path.startswith("/v1/messages")]
    schema = body["output_config"]["format"]["schema"]
    assert schema["additionalProperties"] is False and "maximum" not in schema["properties"]["score"]
