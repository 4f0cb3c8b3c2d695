"""Reactive compaction against a real upstream emulator: Bedrock (in process, SigV4, event-stream
framing) serving a model whose window is 30,000 tokens while the loop is configured for 200,000.

The emulator answers an over-long prompt the way Bedrock does, ``400 ValidationException`` ``Input
is too long.`` (``emulators/bedrock_body.py``); the gateway's Bedrock provider relays that
sentence as ``invalid_request_error``. The loop must recover: summarise the old part with a
request that itself fits, retry, and finish the task.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import orjson
import pytest

import loop
from emulators import EmulatorConfig
from emulators.catalog import DEFAULT_CATALOG, ModelCatalog
from emulators.tokens import bytes_tokens
from loop.callers import ProviderModelCaller
from loop.events import Compaction, StreamEvent
from loop.testing import FakeTool
from loop.transitions import Completed, NextTurn, ReactiveCompactRetry
from tests.loop.support import pairing_violations, run_to_end
from tests.providers.bedrock_harness import apply_aws_env, bedrock_upstream

REAL_WINDOW = 30_000


def history() -> list[dict[str, object]]:
    """An earlier conversation of ~40,000 tokens (by the emulator's count), then the task."""
    messages: list[dict[str, object]] = []
    for i in range(6):
        messages.append(
            {"role": "user", "content": [{"type": "text", "text": f"question {i}: " + "q" * 13_000}]}
        )
        messages.append(
            {"role": "assistant", "content": [{"type": "text", "text": f"answer {i}: " + "a" * 13_000}]}
        )
    messages.append(
        {
            "role": "user",
            "content": [{"type": "text", "text": "[[scenario:tool_use]] [[tool:lookup]] find it"}],
        }
    )
    return messages


async def test_input_is_too_long_from_bedrock_is_recovered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    catalog = ModelCatalog(tuple(replace(spec, context_window=REAL_WINDOW) for spec in DEFAULT_CATALOG))
    async with bedrock_upstream(tmp_path, config=EmulatorConfig(catalog=catalog)) as (env, emulator):
        apply_aws_env(monkeypatch, env)
        lookup = FakeTool("lookup", result="42")
        async with ProviderModelCaller.from_environ({**env, "GATEWAY_MAX_RETRIES": "0"}) as caller:
            run = loop.query(
                loop.QueryParams(history(), tools=[lookup], deps=loop.LoopDeps(call_model=caller))
            )
            events = await run_to_end(run)
    assert run.terminal == Completed("end_turn")
    assert len(lookup.calls) == 1
    recovery = ReactiveCompactRetry("input_too_long", run.state.context.learned_limit)
    assert run.state.transitions == (recovery, NextTurn(1))
    assert not any(isinstance(e, StreamEvent) and e.event.get("type") == "error" for e in events)
    compactions = [e for e in events if isinstance(e, Compaction)]
    assert [(c.layer.value, c.outcome.value) for c in compactions] == [("reactive_compact", "applied")]
    invokes = [r for r in emulator.requests if r.method == "POST" and "/model/" in r.path]
    assert len(invokes) == 4  # refused, the summary, the tool call, the answer
    bodies = [orjson.loads(r.body) for r in invokes]
    sizes = [bytes_tokens(len(r.body)) for r in invokes]
    assert sizes[0] > REAL_WINDOW and all(size < REAL_WINDOW for size in sizes[1:])
    summary_request = bodies[1]
    assert "tools" not in summary_request and "thinking" not in summary_request
    assert pairing_violations(run.messages) == []
    assert (
        run.messages[-1]["content"][0]["text"].startswith("Echo") or run.messages[-1]["role"] == "assistant"
    )
