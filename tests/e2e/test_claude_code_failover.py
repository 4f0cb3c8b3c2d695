"""The real Claude Code CLI through one gateway over two upstreams of different providers, across a
failover of the primary (issue 18).

For the captures' version (2.1.197) and the newest 2.1.x, one ``claude -p`` session (a fixed
``--session-id``) runs:

1. a tool round trip with extended thinking on, served by the primary;
2. the primary fails (a standing 529 storm, or its process gone: connection refused) and the
   session resumes (``--resume``): the secondary serves it, the session moved exactly once, the move
   is the cache break ``upstream_changed``, and the CLI saw no error. The secondary's emulator
   accepted every request (its own cited rules) and none carried a thinking block or signature the
   primary produced (``gateway/upstreams/signatures.py``; checked on the wire: the emulators do not
   verify signatures);
3. the primary recovers (its breaker closed) and the next turn still goes to the secondary, where
   the session's cache now is;
4. once the session was idle past ``affinity.return_after_s`` (the gateway's injected wall clock),
   the next turn returns to the primary.

``test_a_move_inside_the_tool_loop``: the primary fails while the CLI runs the tool it asked for,
so the tool result goes to the secondary after a tool call whose thinking block is left out.

Thinking: in first-party mode Claude Code asks Opus for ``adaptive`` thinking, which the scripted
model answers without thinking blocks; with ``MAX_THINKING_TOKENS`` and a model without adaptive
thinking (``claude-sonnet-4-5``) it sends ``thinking: {"type": "enabled", "budget_tokens": N}`` and
replays the signed thinking blocks in later requests, as a real session with thinking on does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from emulators import EmulatorConfig, RunningEmulator, run_emulator
from emulators.upstreams import FIRST_PARTY_KEY, emulated_upstream
from gateway.app import METRICS_KEY, create_app
from gateway.config import Settings
from gateway.process import RunningServer, running
from tests.e2e.test_claude_code_providers import model_calls
from tests.support.claude_code import ClaudeRun, claude_env, cli, run_claude, versions_under_test
from tests.upstreams.harness import NAMES, entry, write_file

GATEWAY_KEY = "sk-gw-claude-code-failover"
# thinking "enabled" (not adaptive): the scripted model then thinks. The dated id, because every
# provider's emulator answers with it as the message's model: 2.1.197 leaves thinking blocks out of
# the history it replays when the answer's model differs from the one it asked for (with the alias
# ``claude-sonnet-4-5`` on Bedrock, as it does in its own Bedrock mode), 2.1.332 keeps them.
MODEL = "claude-sonnet-4-5-20250929"
# the CLI's own retries off: an error the gateway let through is not hidden by a CLI retry (and a
# failing run ends in seconds, not after ten backed-off retries)
CLI_VARS = {"MAX_THINKING_TOKENS": "2048", "CLAUDE_CODE_MAX_RETRIES": "0"}
TOOL_PROMPT = "[[scenario:tool_use]] [[tool:Bash]] run the command"
RETURN_AFTER_S = 300.0
STORM = "fail_first=1000000:529,retry_after_ms=1"

pytestmark = pytest.mark.timeout(240)


@dataclass(frozen=True)
class Case:
    primary: str  # provider kinds; the upstreams are named as in tests/upstreams/harness.py
    secondary: str
    outage: str  # "storm": a standing 529 storm; "gone": the process stopped (connection refused)
    move_reason: str  # gateway_session_moves_total's reason

    @property
    def id(self) -> str:
        return f"{self.primary}-to-{self.secondary}-{self.outage}"


CASES = (
    Case("bedrock", "vertex", "storm", "status_529"),
    Case("anthropic", "bedrock", "gone", "connection_error"),
)


class Clock:
    """The wall clock of the gateway's placements and breakers (moved by the test)."""

    def __init__(self) -> None:
        self.now = 2_000_000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Pair:
    case: Case
    gateway: RunningServer
    primary: RunningEmulator
    secondary: RunningEmulator
    clock: Clock
    home: Path
    stack: contextlib.AsyncExitStack
    primary_stack: contextlib.AsyncExitStack

    async def fail_primary(self) -> None:
        if self.case.outage == "storm":
            self.primary.set_fault(STORM)
        else:
            await self.primary_stack.aclose()  # its port now refuses connections

    async def recover_primary(self) -> None:
        if self.case.outage == "storm":
            self.primary.set_fault("")
        else:
            port = self.primary.port
            self.primary = await self.stack.enter_async_context(_primary_emulator(self.case.primary, port))

    @property
    def primary_name(self) -> str:
        return NAMES[self.case.primary]

    @property
    def secondary_name(self) -> str:
        return NAMES[self.case.secondary]

    def env(self) -> dict[str, str]:
        return claude_env(
            self.home, ANTHROPIC_BASE_URL=self.gateway.base_url, ANTHROPIC_API_KEY=GATEWAY_KEY, **CLI_VARS
        )

    def samples(self, name: str) -> Iterator[tuple[dict[str, str], float]]:
        registry = self.gateway.runner.app[METRICS_KEY].registry
        for family in registry.collect():
            for sample in family.samples:
                if sample.name == name:
                    yield sample.labels, sample.value

    def metric(self, name: str, **labels: str) -> float:
        return sum(v for found, v in self.samples(name) if labels.items() <= found.items())


@contextlib.asynccontextmanager
async def _primary_emulator(provider: str, port: int) -> AsyncIterator[RunningEmulator]:
    """The primary started again on its old port (the process came back)."""
    config = EmulatorConfig()
    if provider == "anthropic":
        config = replace(config, api_keys=frozenset({FIRST_PARTY_KEY}))
    async with run_emulator(config, port=port, provider=provider) as emulator:
        yield emulator


@contextlib.asynccontextmanager
async def two_upstreams(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Pair]:
    """The primary (in its own exit stack, so the test can stop it) and the secondary, and a
    gateway routing every model to them in that order."""
    async with contextlib.AsyncExitStack() as stack:
        primary_stack = await stack.enter_async_context(contextlib.AsyncExitStack())
        upstreams = []
        for provider, owner in ((case.primary, primary_stack), (case.secondary, stack)):
            workdir = tmp_path / provider
            workdir.mkdir()
            upstream = await owner.enter_async_context(emulated_upstream(provider, workdir))
            for name, value in upstream.process_env.items():  # botocore's credential chain
                monkeypatch.setenv(name, value)
            upstreams.append(upstream)
        sections: dict[str, Any] = {
            "routes": [{"models": ["*"], "upstreams": [NAMES[case.primary], NAMES[case.secondary]]}],
            "affinity": {"return_after_s": RETURN_AFTER_S},
            # the breaker never opens here: what keeps the session on the secondary after the
            # primary recovered is affinity alone
            "breaker": {"failures": 1000},
        }
        path = write_file(tmp_path / "upstreams.json", [entry(u) for u in upstreams], **sections)
        settings = Settings.from_environ(
            {
                "GATEWAY_API_KEYS": GATEWAY_KEY,
                "GATEWAY_UPSTREAMS_FILE": str(path),
                "GATEWAY_MAX_RETRY_DELAY_S": "0.05",
            }
        )
        clock = Clock()
        gateway = await stack.enter_async_context(
            running(create_app(settings, wall_clock=clock), "127.0.0.1", 0)
        )
        yield Pair(
            case,
            gateway,
            upstreams[0].emulator,
            upstreams[1].emulator,
            clock,
            tmp_path / "home",
            stack,
            primary_stack,
        )


def _bodies(emulator: RunningEmulator) -> list[dict[str, Any]]:
    return [json.loads(r.body) for r in model_calls(emulator.requests)]


def _thinking_blocks(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        block
        for message in body.get("messages", [])
        if isinstance(message.get("content"), list)
        for block in message["content"]
        if isinstance(block, dict) and block.get("type") in ("thinking", "redacted_thinking")
    ]


def _ok(run: ClaudeRun) -> dict[str, Any]:
    """The run's result object, after checking the CLI saw no error."""
    assert run.returncode == 0, run.describe()
    assert run.result is not None and not run.result.get("is_error"), run.describe()
    assert run.result.get("subtype") == "success", run.describe()
    return run.result


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
@pytest.mark.parametrize("version", versions_under_test())
async def test_claude_code_session_survives_a_failover(
    version: str, case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    binary = cli(version)
    workdir = tmp_path / "work"
    workdir.mkdir()
    session = str(uuid.uuid4())
    moves, breaks = "gateway_session_moves_total", "gateway_cache_breaks_total"
    async with two_upstreams(case, tmp_path, monkeypatch) as pair:
        primary, secondary = pair.primary_name, pair.secondary_name

        async def resume(prompt: str) -> dict[str, Any]:
            """One more turn of the session (``--resume``): the CLI's result, checked error-free."""
            run = await run_claude(
                binary, ("-p", prompt, "--resume", session, "--model", MODEL, "--max-turns", "1"),
                pair.env(), workdir,
            )  # fmt: skip
            return _ok(run)

        # 1. a tool round trip with thinking, on the primary
        first = await run_claude(
            binary,
            ("-p", TOOL_PROMPT, "--session-id", session, "--model", MODEL,
             "--allowedTools", "Bash", "--max-turns", "4"),
            pair.env(),
            workdir,
        )  # fmt: skip
        assert _ok(first)["num_turns"] >= 2, first.describe()
        on_primary = _bodies(pair.primary)
        assert len(on_primary) >= 2 and not model_calls(pair.secondary.requests), first.describe()
        assert all(b.get("thinking", {}).get("type") == "enabled" for b in on_primary), on_primary[0]
        signatures = {b["signature"] for body in on_primary for b in _thinking_blocks(body)}
        assert signatures, "the tool loop replayed no thinking block: thinking was not on"
        assert pair.metric(moves) == 0

        # 2. the primary fails; the same session goes on, on the secondary
        await pair.fail_primary()
        second = await resume("what did the command print?")
        assert second["session_id"] == session
        on_secondary = model_calls(pair.secondary.requests)
        assert on_secondary
        assert pair.metric(moves) == 1
        assert pair.metric(moves, **{"from": primary, "to": secondary, "reason": case.move_reason}) == 1
        assert pair.metric(breaks, provider=case.secondary, reason="upstream_changed") == 1
        assert pair.metric("gateway_upstream_selected_total", upstream=secondary, reason="failover") == 1
        # a cold cache there: the whole prefix written once, and counted as the cost of the move
        written = second["usage"]["cache_creation_input_tokens"]
        assert second["usage"]["cache_read_input_tokens"] == 0 and written > 0, second["usage"]
        assert pair.metric("gateway_session_move_cache_write_tokens_total", upstream=secondary) == written
        moved = _bodies(pair.secondary)
        # the history (turn 1's assistant turns) went over, without the primary's thinking
        assert any(m["role"] == "assistant" for body in moved for m in body["messages"]), moved
        assert not [b for body in moved for b in _thinking_blocks(body)]
        assert not [s for s in signatures if any(s.encode() in r.body for r in on_secondary)]
        # the secondary accepted everything it was sent (its emulator's own rules)
        assert pair.metric("gateway_upstream_failures_total", upstream=secondary) == 0
        answered = pair.metric("gateway_requests_total", provider=case.secondary, status_class="2xx")
        assert answered == len(on_secondary)

        # 3. the primary recovers (its breaker closed): the session stays where its cache is
        await pair.recover_primary()
        assert pair.metric("gateway_breaker_state", upstream=primary) == 0
        served_before = len(model_calls(pair.primary.requests))
        pair.clock.now += 60
        third = await resume("and now?")
        assert len(model_calls(pair.primary.requests)) == served_before
        assert len(model_calls(pair.secondary.requests)) > len(on_secondary)
        assert third["usage"]["cache_read_input_tokens"] > 0  # the cache the move wrote
        assert pair.metric(moves) == 1
        assert pair.metric("gateway_upstream_selected_total", upstream=secondary, reason="affinity") >= 1
        # its history now comes from two providers: the primary's thinking (from before the move)
        # never goes to the secondary; the turns the secondary produced since keep theirs
        assert not [s for s in signatures if any(s.encode() in r.body for r in model_calls(pair.secondary.requests))]
        since = _bodies(pair.secondary)[len(on_secondary) :]
        assert any(_thinking_blocks(body) for body in since), "the secondary's own thinking was left out"

        # 4. idle past return_after_s (its cache on the secondary would have expired): back home
        pair.clock.now += RETURN_AFTER_S * 2
        await resume("one more")
        assert len(model_calls(pair.primary.requests)) > served_before
        assert pair.metric(moves, **{"from": secondary, "to": primary, "reason": "return"}) == 1
        assert not [b for body in _bodies(pair.primary)[served_before:] for b in _thinking_blocks(body)]


# The tool waits for the test: the primary answered the tool call, and fails before the tool result
# goes back. The moved request's last assistant turn is then a tool call whose thinking block (from
# the primary) is left out, so thinking must be off for it: with thinking on, the API refuses a final
# assistant turn of a tool loop that does not start with a thinking block ("When `thinking` is
# enabled, a final `assistant` message must start with a thinking block (preceeding the lastmost set
# of `tool_use` and `tool_result` blocks)", as reported in n8n-io/n8n#22550 and
# anthropics/claude-code#20705).
WAITING_TOOL_PROMPT = (
    "[[scenario:tool_use]] [[tool:Bash]] "
    '[[input:Bash {"command": "touch waiting; until test -e go; do sleep 0.1; done; echo moved-mid-loop"}]] '
    "run it"
)


@pytest.mark.parametrize("version", versions_under_test())
async def test_a_move_inside_the_tool_loop(
    version: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    binary = cli(version)
    workdir = tmp_path / "work"
    workdir.mkdir()
    case = CASES[0]
    async with two_upstreams(case, tmp_path, monkeypatch) as pair:
        args = ("-p", WAITING_TOOL_PROMPT, "--session-id", str(uuid.uuid4()), "--model", MODEL,
                "--allowedTools", "Bash", "--max-turns", "4")  # fmt: skip
        run = asyncio.create_task(run_claude(binary, args, pair.env(), workdir, timeout_s=90))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while not (workdir / "waiting").exists():  # the tool runs: the tool call was answered
            assert not run.done(), run.result().describe()
            assert loop.time() < deadline, "the tool never ran"
            await asyncio.sleep(0.05)
        await pair.fail_primary()
        (workdir / "go").touch()
        result = _ok(await run)
        assert "moved-mid-loop" in result["result"]  # the tool's output reached the model and back
        tool_call = _bodies(pair.primary)[0]
        assert tool_call.get("thinking", {}).get("type") == "enabled"
        moved = _bodies(pair.secondary)
        assert len(moved) == 1, moved
        last_assistant = [m for m in moved[0]["messages"] if m["role"] == "assistant"][-1]
        assert [b["type"] for b in last_assistant["content"]][-1] == "tool_use"
        assert not _thinking_blocks(moved[0])
        assert moved[0].get("thinking", {"type": "disabled"})["type"] == "disabled"
        assert pair.metric("gateway_session_moves_total") == 1
        assert (
            pair.metric("gateway_cache_breaks_total", provider=case.secondary, reason="upstream_changed") == 1
        )
