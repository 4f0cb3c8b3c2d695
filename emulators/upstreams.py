"""An emulated upstream of any provider with fixture credentials, ready for a gateway to use.

``emulated_upstream("bedrock", workdir)`` starts that provider's emulator and yields the settings
a gateway needs to reach it (``env``) and the variables the cloud SDKs read from the process
environment themselves (``process_env``: the AWS credential chain, google-auth's
``GOOGLE_APPLICATION_CREDENTIALS``). Used by ``python -m bench.demo --provider`` and the benchmarks.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from pathlib import Path

from . import service_accounts
from .config import DEFAULT_FOUNDRY_KEY, EmulatorConfig
from .runner import RunningEmulator, run_emulator

FIRST_PARTY_KEY = "sk-emu-upstream"
VERTEX_PROJECT = "switchyard-demo"
VERTEX_REGION = "us-east5"
VERTEX_ACCOUNT = f"gateway@{VERTEX_PROJECT}.iam.gserviceaccount.com"
PROVIDERS = ("anthropic", "bedrock", "vertex", "foundry")


@dataclass(frozen=True)
class EmulatedUpstream:
    provider: str
    emulator: RunningEmulator
    env: dict[str, str]
    process_env: dict[str, str] = field(default_factory=dict)


@contextlib.asynccontextmanager
async def emulated_upstream(
    provider: str, workdir: Path, config: EmulatorConfig | None = None
) -> AsyncIterator[EmulatedUpstream]:
    config = config or EmulatorConfig()
    if provider == "anthropic":
        config = replace(config, api_keys=frozenset({FIRST_PARTY_KEY}))
        async with run_emulator(config) as emulator:
            env = {"ANTHROPIC_API_KEY": FIRST_PARTY_KEY, "ANTHROPIC_BASE_URL": emulator.base_url}
            yield EmulatedUpstream(provider, emulator, env)
    elif provider == "bedrock":
        from .bedrock_config import DEFAULT_ACCESS_KEY_ID, DEFAULT_SECRET_ACCESS_KEY

        async with run_emulator(config, provider="bedrock") as emulator:
            (workdir / "aws-config").touch()
            (workdir / "aws-credentials").touch()
            env = {
                "GATEWAY_PROVIDER": "bedrock",
                "AWS_REGION": "us-east-1",
                "ANTHROPIC_BEDROCK_BASE_URL": emulator.base_url,
            }
            process_env = {
                "AWS_ACCESS_KEY_ID": DEFAULT_ACCESS_KEY_ID,
                "AWS_SECRET_ACCESS_KEY": DEFAULT_SECRET_ACCESS_KEY,
                "AWS_REGION": "us-east-1",
                "AWS_CONFIG_FILE": str(workdir / "aws-config"),
                "AWS_SHARED_CREDENTIALS_FILE": str(workdir / "aws-credentials"),
                "AWS_EC2_METADATA_DISABLED": "true",
            }
            yield EmulatedUpstream(provider, emulator, env, process_env)
    elif provider == "vertex":
        # the token endpoint lives on the emulator, so its URL is known only once it listens:
        # register the account's public key first, then write the key file pointing at it
        account = service_accounts.generate(VERTEX_PROJECT, VERTEX_ACCOUNT, "http://placeholder/token")
        config = replace(
            config,
            vertex_projects=frozenset({VERTEX_PROJECT}),
            vertex_locations=frozenset({VERTEX_REGION}),
            vertex_service_accounts={VERTEX_ACCOUNT: account.public_key_pem},
        )
        async with run_emulator(config, provider="vertex") as emulator:
            key_path = workdir / "vertex-service-account.json"
            account.write(key_path, token_uri=emulator.base_url + "/token")
            env = {
                "GATEWAY_PROVIDER": "vertex",
                "CLOUD_ML_REGION": VERTEX_REGION,
                "ANTHROPIC_VERTEX_PROJECT_ID": VERTEX_PROJECT,
                "ANTHROPIC_VERTEX_BASE_URL": emulator.base_url + "/v1",
                "GOOGLE_APPLICATION_CREDENTIALS": str(key_path),
            }
            yield EmulatedUpstream(provider, emulator, env, {"GOOGLE_APPLICATION_CREDENTIALS": str(key_path)})
    elif provider == "foundry":
        async with run_emulator(config, provider="foundry") as emulator:
            env = {
                "GATEWAY_PROVIDER": "foundry",
                "ANTHROPIC_FOUNDRY_BASE_URL": emulator.base_url + "/anthropic",
                "ANTHROPIC_FOUNDRY_API_KEY": DEFAULT_FOUNDRY_KEY,
            }
            yield EmulatedUpstream(provider, emulator, env)
    else:
        raise ValueError(f"unknown provider {provider!r}; expected one of {', '.join(PROVIDERS)}")
