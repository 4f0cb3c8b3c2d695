"""The loop on a cloud provider chosen by environment alone: the in-process caller against the
Bedrock emulator (native InvokeModel body, SigV4, event-stream framing translated to SSE)."""

from __future__ import annotations

from pathlib import Path

import pytest

import loop
from loop.callers import ProviderModelCaller
from loop.testing import FakeTool
from loop.transitions import Completed, NextTurn
from tests.loop.support import pairing_violations
from tests.providers.bedrock_harness import apply_aws_env, bedrock_upstream


async def test_an_agent_run_on_bedrock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with bedrock_upstream(tmp_path) as (env, emulator):
        apply_aws_env(monkeypatch, env)
        lookup = FakeTool("lookup", result="42")
        async with ProviderModelCaller.from_environ(env) as caller:
            assert caller.provider.name == "bedrock"
            run = loop.query(
                loop.QueryParams(
                    "[[scenario:agent]] [[tools:lookup]] find the answer",
                    tools=[lookup],
                    deps=loop.LoopDeps(call_model=caller),
                )
            )
            await run.wait()
    assert run.terminal == Completed("end_turn")
    assert run.state.transitions == (NextTurn(1),)
    assert len(lookup.calls) == 1
    assert run.messages[-1]["content"][0]["text"].startswith("All tools finished (lookup).")
    assert pairing_violations(run.messages) == []
    assert all("/model/" in r.path for r in emulator.requests if r.method == "POST")
