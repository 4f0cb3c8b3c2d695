"""Long sessions end to end: the loop → the real gateway (HTTP, the official SDK as the loop's
caller) → each provider's emulator, whose model has a 30,000-token window.

* A 40-turn tool-using session completes on all four providers with ``context_window`` 30,000:
  auto-compaction keeps it in the window (collapse and microcompact are off here, so that it is
  the summary that does it); the first request after each compaction is under the auto-compact
  threshold and reads the static prefix (tools + the ``AgentPrompt``'s static part) from the
  cache, the turn after reads from the cache too, and the gateway's cache-break detector (one
  session, ``x-session-id``) classifies each compaction's break as ``compaction``, and nothing else
  as a break. The static prefix's cache-read share after compactions is measured: 100% (measured:
  a 4,074-token static prefix; two compactions, at turns 20 and 37; the first request after each
  is 5,019 tokens, 4,216 of them read from the cache). A second session in another workspace
  reads the same static prefix on its first request.
* Recoveries through the gateway: a first-party ``prompt is too long`` 400 (the limit is learned
  from it), a first-party 413 ``request_too_large`` (a 100 kB body cap), Bedrock's ``Input is too
  long.`` and Vertex's request-size 400 (sent by the gateway as ``Input is too long.``) are each
  recovered by reactive compaction and the task completes; nothing of the error reaches the
  consumer.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

import loop
from emulators import EmulatorConfig, RunningEmulator
from emulators.catalog import DEFAULT_CATALOG, ModelCatalog
from emulators.prompt import flatten_prompt
from emulators.upstreams import PROVIDERS, emulated_upstream
from gateway.app import create_app
from gateway.config import Settings
from gateway.metrics import GatewayMetrics
from gateway.process import running
from loop.callers import SdkModelCaller
from loop.context.kinds import Layer, Outcome
from loop.events import AssistantMessage, Compaction, StreamEvent
from loop.testing import FakeTool
from loop.transitions import Completed, NextTurn, ReactiveCompactRetry
from tests.loop.support import pairing_violations, run_to_end

GATEWAY_KEY = "sk-gw-context"
WINDOW = 30_000
SESSION = "ctx-session-1"
STEPS = 39
"""Tool turns; the 40th model call answers."""


def window_catalog(window: int) -> ModelCatalog:
    return ModelCatalog(tuple(replace(spec, context_window=window) for spec in DEFAULT_CATALOG))


@dataclass
class Stack:
    provider: str
    gateway_url: str
    emulator: RunningEmulator
    metrics: GatewayMetrics

    def caller(self, session: str = SESSION) -> SdkModelCaller:
        return SdkModelCaller(
            self.gateway_url, GATEWAY_KEY, max_retries=0, default_headers={"x-session-id": session}
        )

    def upstream_bodies(self) -> list[dict[str, Any]]:
        return [
            orjson.loads(r.body)
            for r in self.emulator.requests
            if r.method == "POST" and not r.path.endswith(("count_tokens", "/token")) and r.body
        ]

    def breaks(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for family in self.metrics.registry.collect():
            for sample in family.samples:
                if sample.name == "gateway_cache_breaks_total" and sample.value:
                    out[sample.labels["reason"]] = sample.value
        return out

    async def session_view(self) -> dict[str, Any]:
        async with (
            aiohttp.ClientSession() as http,
            http.get(
                f"{self.gateway_url}/v1/sessions/{SESSION}", headers={"x-api-key": GATEWAY_KEY}
            ) as response,
        ):
            assert response.status == 200
            view: dict[str, Any] = await response.json()
            return view


@contextlib.asynccontextmanager
async def stack(
    provider: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: EmulatorConfig
) -> AsyncIterator[Stack]:
    async with emulated_upstream(provider, tmp_path, config) as upstream:
        for name, value in upstream.process_env.items():
            monkeypatch.setenv(name, value)
        settings = Settings.from_environ({"GATEWAY_API_KEYS": GATEWAY_KEY, **upstream.env})
        metrics = GatewayMetrics()
        async with running(create_app(settings, metrics=metrics), "127.0.0.1", 0) as server:
            yield Stack(provider, server.base_url, upstream.emulator, metrics)


# --- a 40-turn session in a 30k window ------------------------------------------------------------


def step_tools() -> list[FakeTool]:
    def result(name: str) -> Any:
        return lambda _input: (
            f"{name} output:\n" + "\n".join(f"{name} line {i}: " + "v" * 48 for i in range(20))
        )

    return [FakeTool(f"step_{i:02d}", result=result(f"step_{i:02d}")) for i in range(1, STEPS + 1)]


SESSION_CONFIG = loop.LoopConfig(
    context_window=WINDOW,
    max_tokens=4_096,
    escalated_max_tokens=8_192,
    max_turns=60,
    context=loop.ContextConfig(collapse=False, microcompact_keep_results=10_000),
)
"""Effective window 21,808: auto-compact at 10,904, blocking limit at 19,627."""


def static_prefix_tokens(body: dict[str, Any]) -> int:
    """Tokens of tools + the static system block (the first breakpoint), by the emulator's rule."""
    flat = flatten_prompt(body)
    end = next(i for i, block in enumerate(flat.blocks) if block.path == "system.0")
    assert flat.blocks[end].marker is not None
    return sum(block.tokens for block in flat.blocks[: end + 1])


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_40_turn_session_in_a_30k_window(
    provider: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tools = step_tools()
    names = ",".join(tool.name for tool in tools)
    async with stack(provider, tmp_path, monkeypatch, EmulatorConfig(catalog=window_catalog(WINDOW))) as s:
        async with s.caller() as caller:
            run = loop.query(
                loop.QueryParams(
                    f"[[scenario:agent]] [[tools:{names}]] run every step, in order",
                    system=loop.AgentPrompt(tmp_path, SESSION_CONFIG.model, date="2026-01-01"),
                    tools=tools,
                    config=SESSION_CONFIG,
                    deps=loop.LoopDeps(call_model=caller),
                )
            )
            events = await run_to_end(run)
        view = await s.session_view()
        breaks = s.breaks()
        bodies = s.upstream_bodies()
        # another session in another workspace: its first request reads the shared static prefix
        async with s.caller("ctx-session-2") as caller:
            other = loop.query(
                loop.QueryParams(
                    "[[scenario:agent]] [[tools:step_01]] one step",
                    system=loop.AgentPrompt(tmp_path / "elsewhere", SESSION_CONFIG.model, date="2026-01-02"),
                    tools=step_tools(),
                    config=SESSION_CONFIG,
                    deps=loop.LoopDeps(call_model=caller),
                )
            )
            other_first = next(e for e in await run_to_end(other) if isinstance(e, AssistantMessage))
    assert run.terminal == Completed("end_turn"), run.terminal
    assert run.state.turn_count == STEPS + 1
    assert all(len(tool.calls) == 1 for tool in tools)  # nothing re-called after a compaction
    compactions = [e for e in events if isinstance(e, Compaction)]
    assert compactions and all(
        (c.layer, c.outcome) == (Layer.AUTOCOMPACT, Outcome.APPLIED) for c in compactions
    ), compactions
    answers = {e.turn: e for e in events if isinstance(e, AssistantMessage)}
    assert sorted(answers) == list(range(1, STEPS + 2))
    threshold = SESSION_CONFIG.autocompact_threshold
    main_bodies = [b for b in bodies if "tools" in b]
    assert len(main_bodies) == STEPS + 1 and len(bodies) == STEPS + 1 + len(compactions)
    static = static_prefix_tokens(main_bodies[0])
    assert static > 2_048  # cacheable on every model of the catalogue
    for compaction in compactions:
        first, following = answers[compaction.turn].usage, answers[compaction.turn + 1].usage
        assert first.context_tokens < threshold <= compaction.tokens_before
        assert first.cache_read_input_tokens >= static  # tools + static system part still cached
        assert following.cache_read_input_tokens >= first.context_tokens - first.input_tokens - 200
        assert following.cache_read_input_tokens > static
    # the static prefix's cache-read share on the requests after compactions: all of it
    after = [answers[c.turn].usage for c in compactions]
    share = sum(min(u.cache_read_input_tokens, static) for u in after) / (static * len(after))
    assert share == 1.0
    assert static <= other_first.usage.cache_read_input_tokens < answers[1].usage.context_tokens
    # every request of the session (summaries aside) carries the same tools and static block
    assert all(b["tools"] == main_bodies[0]["tools"] for b in main_bodies)
    assert all(b["system"][0]["text"] == main_bodies[0]["system"][0]["text"] for b in main_bodies)
    # the gateway saw one break per compaction, classified as such, and no other
    assert breaks == {"first_request": 1.0, "compaction": float(len(compactions))}
    assert [b["reason"] for b in view["recent_breaks"]][-len(compactions) :] == ["compaction"] * len(
        compactions
    )
    assert pairing_violations(run.messages) == []


# --- prompt-too-long answers recovered through the gateway ------------------------------------------


def long_history(task: str) -> list[dict[str, Any]]:
    """An earlier conversation of ~40,000 tokens (≈ 156 kB), then ``task``."""
    messages: list[dict[str, Any]] = []
    for i in range(6):
        messages.append(
            {"role": "user", "content": [{"type": "text", "text": f"question {i}: " + "q" * 13_000}]}
        )
        messages.append(
            {"role": "assistant", "content": [{"type": "text", "text": f"answer {i}: " + "a" * 13_000}]}
        )
    messages.append({"role": "user", "content": [{"type": "text", "text": task}]})
    return messages


RECOVERIES = {
    # provider, emulator config, the error kind the loop recognises
    "first-party-prompt-too-long": (
        "anthropic",
        EmulatorConfig(catalog=window_catalog(WINDOW)),
        "prompt_too_long",
    ),
    "first-party-413": ("anthropic", EmulatorConfig(max_body_bytes=100_000), "request_too_large"),
    "bedrock-input-too-long": ("bedrock", EmulatorConfig(catalog=window_catalog(WINDOW)), "input_too_long"),
    "vertex-request-size": ("vertex", EmulatorConfig(vertex_max_request_bytes=100_000), "input_too_long"),
}


@pytest.mark.parametrize("case", list(RECOVERIES))
async def test_a_refused_prompt_is_recovered_through_the_gateway(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider, config, kind = RECOVERIES[case]
    lookup = FakeTool("lookup", result="42")
    async with stack(provider, tmp_path, monkeypatch, config) as s:
        async with s.caller() as caller:
            run = loop.query(
                loop.QueryParams(
                    long_history("[[scenario:tool_use]] [[tool:lookup]] find it"),
                    tools=[lookup],
                    deps=loop.LoopDeps(call_model=caller),
                )
            )
            events = await run_to_end(run)
        bodies = s.upstream_bodies()
        posts = [r for r in s.emulator.requests if r.method == "POST" and not r.path.endswith("/token")]
    assert run.terminal == Completed("end_turn"), run.terminal
    assert len(lookup.calls) == 1
    (recovery, next_turn) = run.state.transitions
    assert isinstance(recovery, ReactiveCompactRetry) and recovery.error_kind == kind
    assert next_turn == NextTurn(1)
    if case == "first-party-prompt-too-long":
        assert recovery.learned_limit == WINDOW  # "... tokens > 30000 maximum"
    assert not any(isinstance(e, StreamEvent) and e.event.get("type") == "error" for e in events)
    compactions = [e for e in events if isinstance(e, Compaction)]
    assert [(c.layer, c.outcome) for c in compactions] == [(Layer.REACTIVE_COMPACT, Outcome.APPLIED)]
    if provider != "anthropic" or case == "first-party-prompt-too-long":
        assert len(bodies) == 4  # refused, the summary, the tool call, the answer
        assert "tools" not in bodies[1] and "thinking" not in bodies[1]
    else:  # the emulator does not keep a body over its cap: the refused one is recorded empty
        assert len(posts) == 4 and posts[0].body == b"" and len(bodies) == 3
        assert all(0 < len(r.body) < 100_000 for r in posts[1:])
        assert "tools" not in bodies[0]
    assert pairing_violations(run.messages) == []
