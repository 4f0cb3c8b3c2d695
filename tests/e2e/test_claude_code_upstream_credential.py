"""The real Claude Code CLI when the upstream refuses the gateway's own credential (a revoked or
mistyped ``ANTHROPIC_API_KEY``, AWS secret or Foundry key on the gateway).

The developer's key was accepted by the gateway; the refusal is the operator's to fix, and no
retry can succeed (it sends the same credential). Claude Code retries a 401 like an overload (its
own back-off, 10 retries by default) unless told ``x-should-retry: false``, and answers any
message naming ``x-api-key`` with "Invalid API key · Fix external API key". Before, the first
party's 401 (``invalid x-api-key``) was relayed as it came: every prompt of every developer took
11 upstream attempts and about 188 s, then told them to fix their own key (measured with both
CLI versions). Bedrock and Foundry already answered at once with the gateway's own message; all
three now do.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.e2e.claude_code_stack import provider_stack
from tests.e2e.test_claude_code_providers import model_calls
from tests.support.claude_code import cli, run_claude, versions_under_test

pytestmark = pytest.mark.timeout(300)

# the gateway's credential for each provider, replaced by one the emulator refuses
WRONG_CREDENTIAL = {
    "anthropic": ("ANTHROPIC_API_KEY", "sk-ant-revoked"),
    "bedrock": ("AWS_SECRET_ACCESS_KEY", "revokedrevokedrevoked"),
    "foundry": ("ANTHROPIC_FOUNDRY_API_KEY", "foundry-key-revoked"),
}


@pytest.mark.parametrize("version", versions_under_test())
@pytest.mark.parametrize("provider", sorted(WRONG_CREDENTIAL))
async def test_a_refused_upstream_credential_ends_the_prompt_at_once_and_says_whose(
    provider: str, version: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    binary = cli(version)
    workdir = tmp_path / "work"
    workdir.mkdir()
    name, wrong = WRONG_CREDENTIAL[provider]
    async with provider_stack(provider, tmp_path, monkeypatch, gateway_env={name: wrong}) as stack:
        started = time.monotonic()
        run = await run_claude(binary, ("-p", "hi"), stack.through_gateway_env(), workdir, timeout_s=60)
        elapsed = time.monotonic() - started
        attempts = model_calls(stack.emulator.requests)
    result = run.result
    assert result is not None, run.describe()
    assert result["is_error"] is True and result.get("api_error_status") == 401, run.describe()
    assert "gateway's upstream credential was rejected" in result["result"], run.describe()
    assert "Fix external API key" not in result["result"]  # not the developer's key
    assert len(attempts) == 1, [r.path for r in attempts]  # no retry by Claude Code or the gateway
    assert elapsed < 30, elapsed
