"""Section definitions, the boundary, layout validation, evaluation and input tracing."""

from __future__ import annotations

import copy
import functools
import pickle
from typing import Any

import pytest

from loop.prompt import (
    SYSTEM_PROMPT_DYNAMIC_BOUNDARY,
    DANGEROUS_uncached_system_prompt_section,
    DynamicBoundary,
    PromptInputs,
    PromptLayoutError,
    UncachedBeforeBoundaryError,
    split_at_boundary,
    system_prompt_section,
)


def test_reason_is_mandatory_for_uncached_sections() -> None:
    with pytest.raises(TypeError):
        DANGEROUS_uncached_system_prompt_section("x", lambda: "x")  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="non-empty reason"):
        DANGEROUS_uncached_system_prompt_section("x", lambda: "x", reason="")
    with pytest.raises(ValueError, match="non-empty reason"):
        DANGEROUS_uncached_system_prompt_section("x", lambda: "x", reason="   ")
    with pytest.raises(TypeError, match="reason"):
        DANGEROUS_uncached_system_prompt_section("x", lambda: "x", reason=None)  # type: ignore[arg-type]
    section = DANGEROUS_uncached_system_prompt_section("x", lambda: "x", reason="changes every turn")
    assert not section.cached
    assert section.reason == "changes every turn"


@pytest.mark.parametrize("name", ["", "  "])
def test_section_names_are_non_empty(name: str) -> None:
    with pytest.raises(ValueError, match="name"):
        system_prompt_section(name, lambda: "x")


def test_compute_must_be_callable_with_at_most_one_argument() -> None:
    with pytest.raises(TypeError, match="callable"):
        system_prompt_section("x", "text")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="one positional argument"):
        system_prompt_section("x", lambda a, b: "x")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="one positional argument"):
        system_prompt_section("x", lambda *, inputs: "x")  # type: ignore[arg-type]


async def test_compute_receives_inputs_only_when_it_asks_for_them() -> None:
    inputs = PromptInputs({"model": "opus"})
    text = "fixed"
    assert await system_prompt_section("a", lambda text=text: text).evaluate(inputs) == "fixed"
    assert await system_prompt_section("b", lambda i: i.model).evaluate(inputs) == "opus"

    async def from_inputs(i: PromptInputs) -> str:
        return f"async {i['model']}"

    assert await system_prompt_section("c", from_inputs).evaluate(inputs) == "async opus"
    partial = functools.partial(lambda prefix, i: prefix + i.model, "model: ")
    assert await system_prompt_section("d", partial).evaluate(inputs) == "model: opus"


async def test_compute_must_return_text_or_none() -> None:
    section = system_prompt_section("bad", lambda: 42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="'bad' returned int"):
        await section.evaluate(PromptInputs())
    assert await system_prompt_section("none", lambda: None).evaluate(PromptInputs()) is None


def test_layout_splits_at_the_boundary() -> None:
    a, b, c = (system_prompt_section(n, lambda n=n: n) for n in "abc")
    layout = split_at_boundary([a, b, SYSTEM_PROMPT_DYNAMIC_BOUNDARY, c])
    assert [s.name for s in layout.static] == ["a", "b"]
    assert [s.name for s in layout.dynamic] == ["c"]


def test_without_a_boundary_everything_is_dynamic() -> None:
    a = system_prompt_section("a", lambda: "a")
    dangerous = DANGEROUS_uncached_system_prompt_section("d", lambda: "d", reason="live data")
    layout = split_at_boundary([a, dangerous])
    assert layout.static == ()
    assert [s.name for s in layout.dynamic] == ["a", "d"]


def test_layout_errors() -> None:
    a = system_prompt_section("a", lambda: "a")
    same_name = system_prompt_section("a", lambda: "other")
    dangerous = DANGEROUS_uncached_system_prompt_section("d", lambda: "d", reason="live data")
    boundary = SYSTEM_PROMPT_DYNAMIC_BOUNDARY
    with pytest.raises(PromptLayoutError, match="more than one"):
        split_at_boundary([a, boundary, boundary])
    with pytest.raises(PromptLayoutError, match="named 'a'"):
        split_at_boundary([a, boundary, same_name])
    with pytest.raises(UncachedBeforeBoundaryError, match="'d'"):
        split_at_boundary([a, dangerous, boundary])
    with pytest.raises(TypeError, match="str"):
        split_at_boundary([a, "__SYSTEM_PROMPT_DYNAMIC_BOUNDARY__"])  # type: ignore[list-item]
    assert [s.name for s in split_at_boundary([a, boundary, dangerous]).dynamic] == ["d"]


def test_boundary_is_a_recognisable_singleton() -> None:
    assert repr(SYSTEM_PROMPT_DYNAMIC_BOUNDARY) == "SYSTEM_PROMPT_DYNAMIC_BOUNDARY"
    assert DynamicBoundary() is SYSTEM_PROMPT_DYNAMIC_BOUNDARY
    assert copy.deepcopy(SYSTEM_PROMPT_DYNAMIC_BOUNDARY) is SYSTEM_PROMPT_DYNAMIC_BOUNDARY
    assert pickle.loads(pickle.dumps(SYSTEM_PROMPT_DYNAMIC_BOUNDARY)) is SYSTEM_PROMPT_DYNAMIC_BOUNDARY


def test_inputs_record_every_lookup() -> None:
    inputs = PromptInputs({"model": "opus", "fast": True, "keys": 1})
    assert inputs.model == "opus"
    assert inputs.get("missing", "dflt") == "dflt"
    assert "fast" in inputs
    assert inputs["keys"] == 1
    assert sorted(inputs) == ["fast", "keys", "model"]
    assert inputs.reads == {"model", "missing", "fast", "keys"}
    with pytest.raises(AttributeError, match="'other' is not set"):
        _ = inputs.other
    assert "other" in inputs.reads
    with pytest.raises(AttributeError):
        _ = inputs._private


def test_inputs_are_a_snapshot() -> None:
    values: dict[str, Any] = {"model": "opus"}
    inputs = PromptInputs(values)
    values["model"] = "haiku"
    assert inputs["model"] == "opus"
    assert "opus" not in repr(inputs)  # values (possibly sensitive) are not shown
