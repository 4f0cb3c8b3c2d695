"""The real Claude Code CLI through a gateway with a policy: a denied model and a reached spend cap
are refused with the gateway's own message, which the CLI shows; an allowed model runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from emulators import EmulatorConfig, run_emulator
from gateway.app import create_app
from gateway.config import Settings
from gateway.process import running
from tests.support.claude_code import claude_env, cli, run_claude, versions_under_test

GATEWAY_KEY = "sk-gw-fleet-cc"
CAPPED_KEY = "sk-gw-fleet-cc-capped"
UPSTREAM_KEY = "sk-ant-upstream-fleet-cc"
POLICY = """
base: {models: {deny: [opus]}}
users: [{user: "key:capped", spend_caps: {daily_usd: 0}}]
"""


@pytest.mark.parametrize("version", versions_under_test()[-1:])
async def test_claude_code_sees_the_policy(version: str, tmp_path: Path) -> None:
    binary = cli(version)
    (tmp_path / "policy.yaml").write_text(POLICY)
    (tmp_path / "keys").write_text(f"{GATEWAY_KEY} default\n{CAPPED_KEY} capped\n")
    workdir = tmp_path / "work"
    workdir.mkdir()
    async with run_emulator(EmulatorConfig(api_keys=frozenset({UPSTREAM_KEY})), port=0) as emulator:
        settings = Settings.from_environ(
            {
                "GATEWAY_API_KEYS_FILE": str(tmp_path / "keys"),
                "ANTHROPIC_API_KEY": UPSTREAM_KEY,
                "ANTHROPIC_BASE_URL": emulator.base_url,
                "GATEWAY_POLICY_FILE": str(tmp_path / "policy.yaml"),
            }
        )
        async with running(create_app(settings), "127.0.0.1", 0) as server:

            def env(key: str) -> dict[str, str]:
                return claude_env(
                    tmp_path / f"home-{key}", ANTHROPIC_BASE_URL=server.base_url, ANTHROPIC_API_KEY=key
                )

            allowed = await run_claude(
                binary, ("-p", "say hi", "--model", "claude-sonnet-4-5"), env(GATEWAY_KEY), workdir
            )
            assert allowed.result is not None and not allowed.result.get("is_error"), allowed.describe()
            denied = await run_claude(
                binary, ("-p", "say hi", "--model", "claude-opus-4-5"), env(GATEWAY_KEY), workdir
            )
            assert denied.result is not None and denied.result.get("is_error"), denied.describe()
            assert "not allowed for you by this gateway's policy" in denied.stdout, denied.describe()
            capped = await run_claude(
                binary, ("-p", "say hi", "--model", "claude-sonnet-4-5"), env(CAPPED_KEY), workdir
            )
            assert capped.result is not None and capped.result.get("is_error"), capped.describe()
            assert "Spend limit reached" in capped.stdout, capped.describe()
