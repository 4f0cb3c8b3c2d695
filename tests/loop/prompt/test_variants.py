"""The 2^N guard: runtime conditions read before the boundary multiply the global prefixes."""

from __future__ import annotations

from typing import Any

import pytest

from loop.prompt import (
    SYSTEM_PROMPT_DYNAMIC_BOUNDARY,
    AssemblyContext,
    DANGEROUS_uncached_system_prompt_section,
    PromptInputs,
    PromptPart,
    SectionCache,
    UncachedBeforeBoundaryError,
    assemble_system,
    static_prefix_variants,
    system_prompt_section,
)
from tests.support.counting_sections import reading

BOOL = (False, True)
SPACE = {"fast_mode": BOOL, "auto_memory": BOOL, "plan_mode": BOOL, "model": ("opus", "sonnet", "haiku")}

WELL_FORMED: list[PromptPart] = [
    system_prompt_section("identity", lambda: "You are a coding agent."),
    system_prompt_section("rules", lambda: "Never push to main."),
    SYSTEM_PROMPT_DYNAMIC_BOUNDARY,
    system_prompt_section("model", reading("model")),
    system_prompt_section("fast", reading("fast_mode")),
    DANGEROUS_uncached_system_prompt_section(
        "plan", reading("plan_mode"), reason="toggled by the user per turn"
    ),
]


async def test_well_formed_prompt_has_one_variant() -> None:
    report = await static_prefix_variants(WELL_FORMED, SPACE)
    assert report.variants == 1
    assert report.conditions_read == ()
    assert report.implied_bound == 1
    assert report.ok
    assert report.combinations == 1
    assert report.reads_by_section == {"identity": (), "rules": ()}


async def test_the_digest_is_the_one_assembly_reports() -> None:
    report = await static_prefix_variants(WELL_FORMED, SPACE)
    inputs = {"model": "opus", "fast_mode": True, "plan_mode": False}
    system = await assemble_system(
        WELL_FORMED, AssemblyContext(session=SectionCache(), provider="anthropic", inputs=inputs)
    )
    assert report.digests == {system.static_digest}


async def test_one_runtime_check_before_the_boundary_doubles_the_prefixes() -> None:
    prompt = [
        system_prompt_section("identity", lambda: "You are a coding agent."),
        system_prompt_section("fast", lambda i: "Answer briefly." if i.fast_mode else None),
        SYSTEM_PROMPT_DYNAMIC_BOUNDARY,
    ]
    report = await static_prefix_variants(prompt, SPACE)
    assert report.variants == 2
    assert report.conditions_read == ("fast_mode",)
    assert report.reads_by_section["fast"] == ("fast_mode",)
    assert report.implied_bound == 2
    assert not report.ok


async def test_three_conditions_before_the_boundary_give_eight_prefixes() -> None:
    prompt: list[PromptPart] = [
        system_prompt_section("fast", reading("fast_mode")),
        system_prompt_section("memory", reading("auto_memory")),
        system_prompt_section("plan", reading("plan_mode")),
        SYSTEM_PROMPT_DYNAMIC_BOUNDARY,
        system_prompt_section("model", reading("model")),  # after the boundary: free
    ]
    report = await static_prefix_variants(prompt, SPACE)
    assert report.variants == 8
    assert report.implied_bound == 8
    assert report.conditions_read == ("auto_memory", "fast_mode", "plan_mode")
    assert report.combinations == 8  # "model" is never varied: nobody reads it before the boundary


async def test_conditions_read_only_after_the_boundary_do_not_count() -> None:
    prompt: list[PromptPart] = [
        system_prompt_section("identity", lambda: "static"),
        SYSTEM_PROMPT_DYNAMIC_BOUNDARY,
        *(system_prompt_section(name, reading(name)) for name in SPACE),
    ]
    report = await static_prefix_variants(prompt, SPACE)
    assert (report.variants, report.conditions_read, report.combinations) == (1, (), 1)


async def test_reads_behind_a_branch_are_discovered() -> None:
    def compute(inputs: PromptInputs) -> str:
        if not inputs.plan_mode:
            return "act"
        return "plan: memory on" if inputs.auto_memory else "plan: memory off"

    prompt = [system_prompt_section("mode", compute), SYSTEM_PROMPT_DYNAMIC_BOUNDARY]
    report = await static_prefix_variants(prompt, SPACE)
    assert report.conditions_read == ("auto_memory", "plan_mode")
    assert report.variants == 3
    assert report.implied_bound == 4
    assert report.combinations == 4


async def test_a_read_that_does_not_change_the_text_is_still_reported() -> None:
    prompt = [
        system_prompt_section("peek", lambda i: f"same{i.model[:0]}"),
        SYSTEM_PROMPT_DYNAMIC_BOUNDARY,
    ]
    report = await static_prefix_variants(prompt, SPACE)
    assert report.variants == 1
    assert report.conditions_read == ("model",)
    assert not report.ok


async def test_multi_valued_conditions_and_async_sections() -> None:
    async def model_note(inputs: PromptInputs) -> str:
        return f"Tuned for {inputs.model}"

    prompt = [system_prompt_section("model", model_note), SYSTEM_PROMPT_DYNAMIC_BOUNDARY]
    report = await static_prefix_variants(prompt, SPACE)
    assert report.variants == 3
    assert report.implied_bound == 2  # the 2^N rule of thumb undercounts a 3-valued condition


async def test_inputs_outside_the_space_are_fixed_but_reported() -> None:
    prompt = [system_prompt_section("org", reading("org_name")), SYSTEM_PROMPT_DYNAMIC_BOUNDARY]
    report = await static_prefix_variants(prompt, SPACE, base_inputs={"org_name": "acme"})
    assert (report.variants, report.conditions_read, report.unexplored) == (1, ("org_name",), ("org_name",))
    with pytest.raises(AttributeError, match="'org_name' is not set"):
        await static_prefix_variants(
            [system_prompt_section("o", lambda i: i.org_name), SYSTEM_PROMPT_DYNAMIC_BOUNDARY], SPACE
        )


async def test_guard_rejects_bad_layouts_and_spaces() -> None:
    dangerous = DANGEROUS_uncached_system_prompt_section("now", lambda: "now", reason="clock")
    with pytest.raises(UncachedBeforeBoundaryError):
        await static_prefix_variants([dangerous, SYSTEM_PROMPT_DYNAMIC_BOUNDARY], SPACE)
    bad_spaces: list[dict[str, Any]] = [{"model": "opus"}, {"model": ()}, {"model": {"opus"}}]
    for space in bad_spaces:
        with pytest.raises((TypeError, ValueError)):
            await static_prefix_variants(WELL_FORMED, space)


async def test_combination_explosion_is_refused() -> None:
    space = {f"flag{i}": BOOL for i in range(12)}
    prompt = [system_prompt_section(name, reading(name)) for name in space]
    with pytest.raises(ValueError, match="4096 combinations"):
        await static_prefix_variants([*prompt, SYSTEM_PROMPT_DYNAMIC_BOUNDARY], space, max_combinations=1000)
    report = await static_prefix_variants([*prompt, SYSTEM_PROMPT_DYNAMIC_BOUNDARY], space)
    assert report.variants == report.implied_bound == 4096
