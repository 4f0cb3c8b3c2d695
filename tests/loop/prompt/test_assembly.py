"""assemble_system: the static/dynamic split, cache_control per upstream, byte stability."""

from __future__ import annotations

import hashlib
from typing import Any

import orjson
import pytest

from gateway.config import ProviderName
from gateway.providers.betas import BODY_HALVES
from loop.prompt import (
    EXTENDED_CACHE_TTL_BETA,
    PROMPT_CACHING_SCOPE_BETA,
    SYSTEM_PROMPT_DYNAMIC_BOUNDARY,
    AssemblyContext,
    DANGEROUS_uncached_system_prompt_section,
    PromptPart,
    SectionCache,
    UncachedBeforeBoundaryError,
    assemble_system,
    system_prompt_section,
    tools_include_mcp,
)

PROMPT: list[PromptPart] = [
    system_prompt_section("identity", lambda: "You are a coding agent."),
    system_prompt_section("style", lambda: "Be concise."),
    SYSTEM_PROMPT_DYNAMIC_BOUNDARY,
    system_prompt_section("environment", lambda i: f"Working directory: {i.cwd}"),
    DANGEROUS_uncached_system_prompt_section("clock", lambda i: f"Turn {i.turn}", reason="turn counter"),
]
INPUTS = {"cwd": "/repo", "turn": 1}


def _context(provider: ProviderName | str = "anthropic", **kw: Any) -> AssemblyContext:
    kw.setdefault("inputs", INPUTS)
    return AssemblyContext(session=SectionCache(), provider=provider, **kw)


async def test_two_blocks_static_then_dynamic() -> None:
    system = await assemble_system(PROMPT, _context())
    assert [b["text"] for b in system.blocks] == [
        "You are a coding agent.\n\nBe concise.",
        "Working directory: /repo\n\nTurn 1",
    ]
    assert all(b["type"] == "text" for b in system.blocks)
    assert system.breakpoints == 2


GLOBAL = {"type": "ephemeral", "scope": "global"}
SESSION = {"type": "ephemeral"}


@pytest.mark.parametrize(
    ("provider", "mcp", "static_control"),
    [
        ("anthropic", False, GLOBAL),
        ("anthropic", True, SESSION),
        (ProviderName.ANTHROPIC, False, GLOBAL),
        ("bedrock", False, SESSION),
        ("vertex", False, SESSION),
        ("foundry", False, SESSION),
        (ProviderName.FOUNDRY, True, SESSION),
    ],
)
@pytest.mark.parametrize("ttl_1h", [False, True])
async def test_cache_control_per_upstream(
    provider: ProviderName | str, mcp: bool, static_control: dict[str, str], ttl_1h: bool
) -> None:
    system = await assemble_system(PROMPT, _context(provider, has_mcp_tools=mcp, ttl_1h=ttl_1h))
    ttl = {"ttl": "1h"} if ttl_1h else {}
    assert system.blocks[0]["cache_control"] == {**static_control, **ttl}
    assert system.blocks[1]["cache_control"] == {**SESSION, **ttl}
    expected_betas = ((EXTENDED_CACHE_TTL_BETA,) if ttl_1h else ()) + (
        (PROMPT_CACHING_SCOPE_BETA,) if "scope" in static_control else ()
    )
    assert system.betas == expected_betas


async def test_cache_control_key_order_matches_claude_code() -> None:
    system = await assemble_system(PROMPT, _context(ttl_1h=True))
    assert list(system.blocks[0]["cache_control"]) == ["type", "ttl", "scope"]
    assert (
        orjson.dumps(system.blocks[0]["cache_control"]) == b'{"type":"ephemeral","ttl":"1h","scope":"global"}'
    )


async def test_caller_can_refuse_the_global_scope() -> None:
    system = await assemble_system(PROMPT, _context(global_scope_eligible=False))
    assert system.blocks[0]["cache_control"] == SESSION


async def test_byte_stable_within_a_session() -> None:
    context = _context(ttl_1h=True)
    first = await assemble_system(PROMPT, context)
    second = await assemble_system(PROMPT, context)
    assert orjson.dumps(first.blocks) == orjson.dumps(second.blocks)
    assert first.blocks is not second.blocks
    first.blocks[0]["text"] = "mutated by a caller"
    third = await assemble_system(PROMPT, context)
    assert orjson.dumps(third.blocks) == orjson.dumps(second.blocks)


async def test_static_part_is_identical_across_sessions_and_users() -> None:
    alice = await assemble_system(PROMPT, _context(inputs={"cwd": "/alice", "turn": 7}))
    bob = await assemble_system(PROMPT, _context(inputs={"cwd": "/bob", "turn": 1}))
    assert orjson.dumps(alice.blocks[0]) == orjson.dumps(bob.blocks[0])
    assert alice.static_digest == bob.static_digest
    assert alice.static_digest == hashlib.sha256(alice.blocks[0]["text"].encode()).hexdigest()
    assert alice.blocks[1] != bob.blocks[1]


async def test_empty_sections_and_empty_parts_produce_no_block() -> None:
    prompt: list[PromptPart] = [
        system_prompt_section("none", lambda: None),
        system_prompt_section("blank", lambda: "  \n"),
        system_prompt_section("empty", lambda: ""),
        SYSTEM_PROMPT_DYNAMIC_BOUNDARY,
        system_prompt_section("a", lambda: "A"),
        system_prompt_section("gap", lambda: None),
        system_prompt_section("b", lambda: "B"),
    ]
    system = await assemble_system(prompt, _context())
    assert system.blocks == [{"type": "text", "text": "A\n\nB", "cache_control": SESSION}]
    assert (system.breakpoints, system.static_digest, system.betas) == (1, None, ())

    static_only = await assemble_system([*prompt[:3], system_prompt_section("s", lambda: "S")], _context())
    assert static_only.blocks == [{"type": "text", "text": "S", "cache_control": SESSION}]

    nothing = await assemble_system([SYSTEM_PROMPT_DYNAMIC_BOUNDARY], _context())
    assert (nothing.blocks, nothing.breakpoints) == ([], 0)


async def test_static_part_keeps_the_global_scope_without_a_dynamic_part() -> None:
    prompt = [system_prompt_section("s", lambda: "S"), SYSTEM_PROMPT_DYNAMIC_BOUNDARY]
    system = await assemble_system(prompt, _context())
    assert system.blocks == [{"type": "text", "text": "S", "cache_control": GLOBAL}]


async def test_uncached_section_before_the_boundary_is_rejected() -> None:
    ran = False

    def compute() -> str:
        nonlocal ran
        ran = True
        return "now"

    prompt = [
        DANGEROUS_uncached_system_prompt_section("now", compute, reason="timestamp"),
        SYSTEM_PROMPT_DYNAMIC_BOUNDARY,
    ]
    with pytest.raises(UncachedBeforeBoundaryError, match="'now'"):
        await assemble_system(prompt, _context())
    assert not ran


async def test_first_failing_section_in_prompt_order_is_raised() -> None:
    def boom(message: str) -> Any:
        def compute() -> str:
            raise RuntimeError(message)

        return compute

    prompt = [
        system_prompt_section("ok", lambda: "ok"),
        system_prompt_section("first", boom("first")),
        SYSTEM_PROMPT_DYNAMIC_BOUNDARY,
        system_prompt_section("second", boom("second")),
    ]
    with pytest.raises(RuntimeError, match="first"):
        await assemble_system(prompt, _context())


def test_unknown_provider_is_rejected_early() -> None:
    with pytest.raises(ValueError, match="unknown provider 'Anthropic'"):
        _context("Anthropic")
    assert _context("vertex").provider is ProviderName.VERTEX


def test_mcp_tools_are_detected_by_name() -> None:
    assert not tools_include_mcp(None)
    assert not tools_include_mcp([{"name": "Bash"}, {"name": "Read"}])
    assert tools_include_mcp([{"name": "Bash"}, {"name": "mcp__github__create_issue"}])
    assert not tools_include_mcp([{"type": "web_search_20250305", "name": "web_search"}])


def test_beta_names_match_the_gateway_policy() -> None:
    assert {EXTENDED_CACHE_TTL_BETA, PROMPT_CACHING_SCOPE_BETA} <= set(BODY_HALVES)
