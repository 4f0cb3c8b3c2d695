"""Per-session memoisation: cached sections run once per session, uncached ones every request."""

from __future__ import annotations

import asyncio

import pytest

from loop.prompt import (
    SYSTEM_PROMPT_DYNAMIC_BOUNDARY,
    AssemblyContext,
    DANGEROUS_uncached_system_prompt_section,
    PromptInputs,
    SectionCache,
    assemble_system,
    system_prompt_section,
)
from tests.support.counting_sections import AsyncCounter, Counter


def _context(session: SectionCache, **inputs: object) -> AssemblyContext:
    return AssemblyContext(session=session, provider="anthropic", inputs=inputs)


async def test_cached_sections_compute_once_per_session() -> None:
    static, dynamic = Counter("static"), AsyncCounter("dynamic")
    prompt = [
        system_prompt_section("static", static),
        SYSTEM_PROMPT_DYNAMIC_BOUNDARY,
        system_prompt_section("dynamic", dynamic),
    ]
    session = SectionCache()
    for _ in range(3):
        await assemble_system(prompt, _context(session))
    assert (static.calls, dynamic.calls) == (1, 1)

    await assemble_system(prompt, _context(SectionCache()))
    assert (static.calls, dynamic.calls) == (2, 2)


async def test_memoised_text_is_latched_for_the_session() -> None:
    prompt = [SYSTEM_PROMPT_DYNAMIC_BOUNDARY, system_prompt_section("env", lambda i: f"model {i.model}")]
    session = SectionCache()
    first = await assemble_system(prompt, _context(session, model="opus"))
    later = await assemble_system(prompt, _context(session, model="haiku"))
    assert first.blocks == later.blocks
    assert first.blocks[0]["text"] == "model opus"
    fresh = await assemble_system(prompt, _context(SectionCache(), model="haiku"))
    assert fresh.blocks[0]["text"] == "model haiku"


async def test_uncached_sections_compute_every_request() -> None:
    live = Counter("live")
    prompt = [
        SYSTEM_PROMPT_DYNAMIC_BOUNDARY,
        DANGEROUS_uncached_system_prompt_section("live", live, reason="reflects connected servers"),
    ]
    session = SectionCache()
    for _ in range(4):
        await assemble_system(prompt, _context(session))
    assert live.calls == 4
    assert "live" not in session


async def test_uncached_section_sees_each_request_inputs() -> None:
    prompt = [
        SYSTEM_PROMPT_DYNAMIC_BOUNDARY,
        DANGEROUS_uncached_system_prompt_section("mcp", lambda i: i.mcp, reason="servers come and go"),
    ]
    session = SectionCache()
    one = await assemble_system(prompt, _context(session, mcp="server A"))
    two = await assemble_system(prompt, _context(session, mcp="server B"))
    assert (one.blocks[0]["text"], two.blocks[0]["text"]) == ("server A", "server B")


async def test_concurrent_requests_of_a_session_compute_once() -> None:
    slow = AsyncCounter("slow", delay=0.01)
    prompt = [system_prompt_section("slow", slow), SYSTEM_PROMPT_DYNAMIC_BOUNDARY]
    session = SectionCache()
    results = await asyncio.gather(*(assemble_system(prompt, _context(session)) for _ in range(5)))
    assert slow.calls == 1
    assert all(r.blocks == results[0].blocks for r in results)


async def test_a_failing_compute_is_not_memoised() -> None:
    attempts = 0

    def flaky() -> str:
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            raise OSError("CLAUDE.md unreadable")
        return "memory"

    section = system_prompt_section("memory", flaky)
    session = SectionCache()
    with pytest.raises(OSError, match="unreadable"):
        await session.resolve(section, PromptInputs())
    assert await session.resolve(section, PromptInputs()) == "memory"
    assert await session.resolve(section, PromptInputs()) == "memory"
    assert attempts == 2


async def test_none_results_are_memoised_too() -> None:
    absent = Counter(None)
    section = system_prompt_section("absent", absent)
    session = SectionCache()
    for _ in range(3):
        assert await session.resolve(section, PromptInputs()) is None
    assert absent.calls == 1


async def test_invalidate_and_clear_force_recomputation() -> None:
    a, b = Counter("a"), Counter("b")
    sections = [system_prompt_section("a", a), system_prompt_section("b", b)]
    session = SectionCache()

    async def resolve_all() -> None:
        for section in sections:
            await session.resolve(section, PromptInputs())

    await resolve_all()
    session.invalidate("a")
    await resolve_all()
    assert (a.calls, b.calls) == (2, 1)
    session.clear()
    assert len(session) == 0
    await resolve_all()
    assert (a.calls, b.calls) == (3, 2)
