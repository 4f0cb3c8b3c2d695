"""The real Claude Code CLI against a persistent 529 through the gateway: bounded upstream attempts.

Claude Code retries at the application level (10 retries by default, ``CLAUDE_CODE_MAX_RETRIES``)
with a fresh SDK request each time, so every attempt says ``x-stainless-retry-count: 0``; the
gateway recognises its retries by their repeated body (``gateway.retry_memory``). With the
gateway's defaults a prompt costs one gateway retry under Claude Code's first attempt and none under
the others: 1 + (1 + R) upstream attempts for R client retries, 12 for the default R = 10 (without
the budget: 11 x 11 = 121).

Claude Code's own back-off (0.5 s doubling to a 32 s cap, about 3 minutes for 10 retries, whatever
``retry-after`` says below that) could not be shortened from outside (2.1.332's
``CLAUDE_CODE_OVERLOADED_RETRY_BASE_DELAY_MS`` changed nothing in ``-p`` runs), so the default run is opt-in
(``SWITCHYARD_SLOW_TESTS=1``); the suite runs R = 3 (``CLAUDE_CODE_MAX_RETRIES``), a few seconds.
Measured by hand (README, "Retries"): 2.1.332 and 2.1.197 made 11 attempts each, 12 upstream
attempts in 178-186 s through the gateway (11 in 189-197 s directly).

``x-should-retry: false`` on a 529 stops 2.1.332 but not 2.1.197 (its retry decision checks
``overloaded_error`` before the header): the bound must not depend on the client honouring it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from emulators import EmulatorConfig, run_emulator
from gateway.app import create_app
from gateway.config import Settings
from gateway.metrics import GatewayMetrics
from gateway.process import running
from tests.support.claude_code import PINNED, ClaudeRun, claude_env, cli, newest_version, run_claude

KEY = "sk-gw-claude"
UPSTREAM_KEY = "sk-up"
MODEL = "claude-sonnet-4-5"
# every first-party answer a 529 with retry-after-ms: 1 and retry-after: 0 (Claude Code waits at
# least retry-after: nothing beyond its own back-off), through the emulator's fault header
OVERLOADED = "x-emulator-fault: fail_first=100000:529,retry_after_ms=1,retry_after=0"
SLOW = os.environ.get("SWITCHYARD_SLOW_TESTS") == "1"


class Outcome:
    def __init__(self, run: ClaudeRun, upstream: list[str], client_attempts: float, wall_s: float) -> None:
        self.run = run
        self.upstream = upstream  # the paths the emulator received
        self.client_attempts = client_attempts  # the requests Claude Code made to the gateway
        self.wall_s = wall_s


async def _prompt(
    binary: Path,
    tmp_path: Path,
    gateway_env: dict[str, str],
    cli_env: dict[str, str],
    timeout_s: float = 100.0,
) -> Outcome:
    config = EmulatorConfig(api_keys=frozenset({UPSTREAM_KEY}))
    async with run_emulator(config) as emu:
        settings = Settings.from_environ(
            {
                "GATEWAY_API_KEYS": KEY,
                "ANTHROPIC_API_KEY": UPSTREAM_KEY,
                "ANTHROPIC_BASE_URL": emu.base_url,
                **gateway_env,
            }
        )
        metrics = GatewayMetrics()
        async with running(create_app(settings, metrics=metrics), "127.0.0.1", 0) as gateway:
            env = claude_env(
                tmp_path / "home",
                ANTHROPIC_BASE_URL=gateway.base_url,
                ANTHROPIC_API_KEY=KEY,
                ANTHROPIC_CUSTOM_HEADERS=OVERLOADED,
                **cli_env,
            )
            started = time.monotonic()
            run = await run_claude(binary, ["-p", "hi", "--model", MODEL], env, tmp_path, timeout_s=timeout_s)
            wall = time.monotonic() - started
            client_attempts = sum(
                sample.value
                for family in metrics.registry.collect()
                if family.name == "gateway_requests"
                for sample in family.samples
                if sample.name == "gateway_requests_total" and sample.labels["status_class"] == "5xx"
            )
            return Outcome(run, [r.path_only for r in emu.requests], client_attempts, wall)


def _assert_overloaded(outcome: Outcome) -> None:
    result = outcome.run.result
    assert result is not None, outcome.run.describe()
    assert result["is_error"] is True and "529" in str(result.get("result")), outcome.run.describe()
    assert set(outcome.upstream) == {"/v1/messages"}


@pytest.mark.parametrize("version", [PINNED, "newest"])
async def test_claude_code_retries_cost_one_gateway_retry(tmp_path: Path, version: str) -> None:
    binary = _binary(version)
    outcome = await _prompt(binary, tmp_path, {}, {"CLAUDE_CODE_MAX_RETRIES": "3"})
    _assert_overloaded(outcome)
    assert outcome.client_attempts == 4  # Claude Code's own attempts: 1 + 3 retries
    assert len(outcome.upstream) == 5  # one gateway retry in all, under the first attempt
    assert outcome.wall_s < 30


@pytest.mark.parametrize(("version", "honours"), [(PINNED, False), ("newest", True)])
async def test_client_retry_limit(tmp_path: Path, version: str, honours: bool) -> None:
    """GATEWAY_CLIENT_RETRY_LIMIT=1: the gateway says x-should-retry: false after the first retry."""
    outcome = await _prompt(
        _binary(version), tmp_path, {"GATEWAY_CLIENT_RETRY_LIMIT": "1"}, {"CLAUDE_CODE_MAX_RETRIES": "2"}
    )
    _assert_overloaded(outcome)
    assert outcome.client_attempts == (2 if honours else 3)
    assert len(outcome.upstream) == outcome.client_attempts + 1


@pytest.mark.skipif(
    not SLOW,
    reason="about 3 minutes of Claude Code's own back-off: run `make soak` (SWITCHYARD_SLOW_TESTS=1)",
)
@pytest.mark.timeout(900)
@pytest.mark.parametrize("version", [PINNED, "newest"])
async def test_claude_code_defaults_cost_twelve_upstream_attempts(tmp_path: Path, version: str) -> None:
    outcome = await _prompt(_binary(version), tmp_path, {}, {}, timeout_s=400)
    _assert_overloaded(outcome)
    assert outcome.client_attempts == 11  # 1 + Claude Code's default 10 retries
    assert len(outcome.upstream) == 12  # the README's worst case for Claude Code's defaults
    print(f"Claude Code {version}: 12 upstream attempts in {outcome.wall_s:.1f} s")


def _binary(version: str) -> Path:
    resolved = newest_version() if version == "newest" else version
    if resolved is None:
        pytest.skip("no Claude Code 2.1.x available (no registry and none installed)")
    return cli(resolved)
