"""The agent's system prompt (``loop.system_prompt``): one static prefix for every session, the
session's part memoised, and what the loop sends with it."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import loop
from loop.context.session import ContextSession
from loop.prompt import PROMPT_CACHING_SCOPE_BETA, SectionCache, static_prefix_variants
from loop.system_prompt import AgentPrompt, default_parts
from loop.testing import FakeModel, FakeResponse, VirtualClock, text
from tests.loop.support import run_to_end

CONDITIONS = {
    "workspace": ("/a", "/b"),
    "model": ("claude-sonnet-4-6", "claude-opus-4-5"),
    "platform": ("linux", "darwin"),
    "date": ("2026-01-01", "2026-01-02"),
}


async def test_the_static_part_reads_no_runtime_input() -> None:
    report = await static_prefix_variants(default_parts(), CONDITIONS)
    assert report.ok and report.variants == 1 and report.conditions_read == ()


async def test_two_breakpoints_and_the_session_memo(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").write_text("Run `make test` before you finish.\n")
    prompt = AgentPrompt(tmp_path, "claude-sonnet-4-6", date="2026-01-01")
    sections = SectionCache()
    first = await prompt.assemble(sections, "bedrock")
    static, dynamic = first.blocks
    assert static["cache_control"] == {"type": "ephemeral"} and first.betas == ()
    assert static["text"].startswith("You are a software engineering agent") and len(static["text"]) > 6_000
    assert str(tmp_path) not in static["text"]
    assert f"Workspace root: {tmp_path}" in dynamic["text"] and "make test" in dynamic["text"]
    (tmp_path / "AGENTS.md").write_text("Something else.\n")
    again = await prompt.assemble(sections, "bedrock")
    assert again.blocks == first.blocks  # the session keeps its bytes
    other_session = await AgentPrompt(tmp_path / "..", "claude-opus-4-5").assemble(SectionCache(), "bedrock")
    assert other_session.blocks[0] == static and other_session.blocks[1] != dynamic
    first_party = await prompt.assemble(SectionCache(), "anthropic", global_scope=True)
    assert first_party.blocks[0]["cache_control"] == {"type": "ephemeral", "scope": "global"}
    assert first_party.betas == (PROMPT_CACHING_SCOPE_BETA,)
    mcp = await prompt.assemble(SectionCache(), "anthropic", tools=[{"name": "mcp__x__y"}], global_scope=True)
    assert mcp.blocks[0]["cache_control"] == {"type": "ephemeral"}


class FirstPartyCaller:
    """The FakeModel behind a caller that says its upstream is the first-party API."""

    def __init__(self, model: FakeModel) -> None:
        self.model = model
        self.provider = SimpleNamespace(name="anthropic")

    def __call__(self, request: loop.ModelRequest):  # type: ignore[no-untyped-def]
        return self.model(request)


async def test_the_loop_sends_the_assembled_prompt(tmp_path: Path) -> None:
    session = ContextSession()
    prompt = AgentPrompt(tmp_path, "claude-sonnet-4-6", date="2026-01-01")
    expected = await prompt.assemble(SectionCache(), "anthropic")
    for caller_kind in ("plain", "first_party"):
        model = FakeModel([FakeResponse.of(text("done"))])
        caller = model if caller_kind == "plain" else FirstPartyCaller(model)
        run = loop.query(
            loop.QueryParams(
                "hi",
                system=prompt,
                deps=loop.LoopDeps(call_model=caller, clock=VirtualClock()),
                session=session,
                config=loop.LoopConfig(context=loop.ContextConfig(server_context_edits=False)),
            )
        )
        await run_to_end(run)
        (request,) = model.requests
        system = request.body["system"]
        assert [b["text"] for b in system] == [b["text"] for b in expected.blocks]
        if caller_kind == "plain":  # an Anthropic-compatible URL: no global scope
            assert system == expected.blocks and request.betas == ()
        else:
            assert system[0]["cache_control"] == {"type": "ephemeral", "scope": "global"}
            assert request.betas == (PROMPT_CACHING_SCOPE_BETA,)
        # the prompt's two breakpoints plus the newest message's: within the API's four
        markers = sum("cache_control" in b for b in system)
        markers += sum("cache_control" in b for m in request.body["messages"] for b in m["content"])
        assert markers == 3
