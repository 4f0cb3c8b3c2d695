"""The real Claude Code CLI compacting its own context through the gateway, on every provider.

A small auto-compact window (``CLAUDE_CODE_AUTO_COMPACT_WINDOW`` at its 100k minimum, lowered to
25% by ``CLAUDE_AUTOCOMPACT_PCT_OVERRIDE``) makes the second ``--continue`` turn of a session whose
tool results are ~5k tokens each compact: Claude Code sends its summarisation call (the history plus
an instruction appended to the last user message), then continues from a summary that replaces the
history. Both shapes must pass each emulator's rules (Bedrock's and Vertex's beta and body rules
included), and the gateway's cache-break detection must explain every shortfall it sees: no
``unknown`` break (a break the requests do not explain: the gateway's own doing, or a detector
that lost track of the conversation).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.e2e.claude_code_stack import GATEWAY_KEY, provider_stack
from tests.e2e.test_claude_code_providers import PROVIDERS, model_calls
from tests.support.claude_code import cli, run_claude, versions_under_test

pytestmark = pytest.mark.timeout(300)

COMPACT_SOON = {"CLAUDE_CODE_AUTO_COMPACT_WINDOW": "100000", "CLAUDE_AUTOCOMPACT_PCT_OVERRIDE": "25"}
EXPLAINED = {"first_request", "compaction", "messages_edited"}


def _prompt(turn: int) -> str:
    tool_input = json.dumps({"command": f"seq {turn} 3000", "description": "numbers"})
    return f"[[scenario:tool_use]] [[tool:Bash]] [[input:Bash {tool_input}]] turn {turn}"


def _first_message(body: bytes) -> Any:
    return json.loads(body)["messages"][0]


async def _breaks(gateway_url: str, session_id: str) -> list[str]:
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{gateway_url}/v1/sessions/{session_id}", headers={"x-api-key": GATEWAY_KEY}) as answer,
    ):
        assert answer.status == 200, await answer.text()
        return [entry["reason"] for entry in (await answer.json())["recent_breaks"]]


@pytest.mark.parametrize("version", versions_under_test())
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_claude_code_auto_compaction_through_the_gateway(
    provider: str, version: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    binary = cli(version)
    workdir = tmp_path / "work"
    workdir.mkdir()
    async with provider_stack(provider, tmp_path, monkeypatch) as stack:
        env = stack.through_gateway_env(**COMPACT_SOON)
        session_id = None
        for turn in range(2):
            args = ["-p", _prompt(turn), "--model", "opus", "--allowedTools", "Bash", "--max-turns", "4"]
            run = await run_claude(binary, [*args, "--continue"] if turn else args, env, workdir)
            assert run.result is not None and not run.result.get("is_error"), run.describe()
            session_id = run.result["session_id"]
        calls = model_calls(stack.emulator.requests)
        assert session_id is not None
        breaks = await _breaks(stack.gateway_url, session_id)
    # the history was replaced by a summary (Claude Code compacted), and every upstream call passed
    firsts = [_first_message(call.body) for call in calls]
    assert any(first != firsts[0] for first in firsts[1:]), "Claude Code did not compact"
    assert set(breaks) <= EXPLAINED, breaks
    assert "compaction" in breaks or "messages_edited" in breaks, breaks  # the summary's turn
