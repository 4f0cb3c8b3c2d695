"""A Bedrock upstream for gateway tests: the Bedrock emulator on a loopback socket, plus the
environment a gateway needs to use it.

    async with bedrock_upstream(tmp_path) as (env, emulator):
        apply_aws_env(monkeypatch, env)            # botocore reads AWS_* from os.environ
        async with bedrock_gateway(env) as gateway:
            client = anthropic.AsyncAnthropic(api_key=GATEWAY_KEY, base_url=gateway.base_url)

``env`` holds ``GATEWAY_PROVIDER=bedrock``, ``AWS_REGION``, ``ANTHROPIC_BEDROCK_BASE_URL`` and the
fixture credentials (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``), with ``AWS_CONFIG_FILE`` /
``AWS_SHARED_CREDENTIALS_FILE`` pointing at empty files in ``tmp_path`` and instance metadata
disabled, so no developer or CI credential is ever picked up. **The caller must put the ``AWS_*``
entries into ``os.environ``** (``apply_aws_env`` does it with ``monkeypatch``): the gateway's
``Settings`` come from the mapping it is given, but botocore's credential chain reads the process
environment when the provider starts. The repository's conftest clears ``AWS_*`` before each test.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import pytest
from aiohttp import web

from emulators import EmulatorConfig, RunningEmulator
from emulators.bedrock import create_app as create_bedrock_app
from emulators.bedrock_config import DEFAULT_ACCESS_KEY_ID, DEFAULT_SECRET_ACCESS_KEY, BedrockOptions
from gateway.app import create_app
from gateway.config import Settings
from gateway.metrics import GatewayMetrics
from gateway.process import RunningServer, running
from gateway.providers.bedrock import BedrockProvider

GATEWAY_KEY = "sk-gw-bedrock-tests"


@contextlib.asynccontextmanager
async def serve_bedrock_emulator(
    config: EmulatorConfig | None = None, options: BedrockOptions | None = None
) -> AsyncIterator[RunningEmulator]:
    """The Bedrock emulator (with optional Bedrock options) on a free loopback port."""
    app = create_bedrock_app(config, options)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        yield RunningEmulator(app, "127.0.0.1", int(runner.addresses[0][1]))
    finally:
        await runner.cleanup()


def isolated_aws_files(tmp_path: Path) -> dict[str, str]:
    """Empty shared config/credentials files and no instance metadata: nothing ambient is read."""
    config = tmp_path / "aws-config"
    credentials = tmp_path / "aws-credentials"
    config.touch()
    credentials.touch()
    return {
        "AWS_CONFIG_FILE": str(config),
        "AWS_SHARED_CREDENTIALS_FILE": str(credentials),
        "AWS_EC2_METADATA_DISABLED": "true",
    }


@contextlib.asynccontextmanager
async def bedrock_upstream(
    tmp_path: Path,
    *,
    config: EmulatorConfig | None = None,
    options: BedrockOptions | None = None,
    static_keys: bool = True,
) -> AsyncIterator[tuple[dict[str, str], RunningEmulator]]:
    """Start the emulator; yield ``(env, emulator)``. ``static_keys=False`` leaves out the keys."""
    options = options or BedrockOptions()
    async with serve_bedrock_emulator(config, options) as emulator:
        env = {
            "GATEWAY_PROVIDER": "bedrock",
            "AWS_REGION": options.region,
            "ANTHROPIC_BEDROCK_BASE_URL": emulator.base_url,
            **isolated_aws_files(tmp_path),
        }
        if static_keys:
            env["AWS_ACCESS_KEY_ID"] = DEFAULT_ACCESS_KEY_ID
            env["AWS_SECRET_ACCESS_KEY"] = DEFAULT_SECRET_ACCESS_KEY
        yield env, emulator


def apply_aws_env(monkeypatch: pytest.MonkeyPatch, env: Mapping[str, str]) -> None:
    """Put the ``AWS_*`` entries of ``env`` into ``os.environ`` for the rest of the test."""
    for name, value in env.items():
        if name.startswith("AWS_"):
            monkeypatch.setenv(name, value)


@contextlib.asynccontextmanager
async def bedrock_gateway(
    env: Mapping[str, str], **overrides: str
) -> AsyncIterator[tuple[RunningServer, BedrockProvider]]:
    """A gateway in this event loop in front of the emulator (no gateway retries by default)."""
    settings = Settings.from_environ(
        {"GATEWAY_API_KEYS": GATEWAY_KEY, "GATEWAY_MAX_RETRIES": "0", **env, **overrides}
    )
    provider = BedrockProvider(settings)
    app = create_app(settings, provider, metrics=GatewayMetrics())
    async with running(app, "127.0.0.1", 0) as server:
        yield server, provider
