"""What a default gateway does not load: no unused provider's SDK, no optional dependency of a feature
that is not configured (fleet sign-in, policy file, OTLP forwarding, several upstreams, Redis), no
repository tool. Start-up time (issue 12): each of these costs tens of milliseconds to import."""

from __future__ import annotations

import subprocess
import sys

import orjson
import pytest

# what ``switchyard serve`` loads before its first request (gateway.cli.cmd_serve, gateway.process.serve)
PROBE = """
import sys, orjson
environ = orjson.loads(sys.argv[1])
import gateway.cli
from gateway.config import Settings
settings = Settings.from_environ(environ, serving=True)
import gateway.process, gateway.startup_summary
gateway.startup_summary.public_summary(settings)
from gateway.app import create_app
create_app(settings)
from gateway.fleet.policy_file import PolicyIn
print(orjson.dumps({"modules": sorted(sys.modules), "policy_validator_built": PolicyIn.__pydantic_complete__}).decode())
"""

FIRST_PARTY = {"GATEWAY_API_KEYS": "k", "ANTHROPIC_API_KEY": "u"}

# third-party packages a default gateway never needs (top-level names)
HEAVY = frozenset(
    {
        "botocore", "boto3", "google", "azure", "msal", "redis", "joserfc", "authlib", "jwt", "yaml",
        "opentelemetry", "anthropic", "cryptography", "requests", "hypothesis", "pytest",
    }
)  # fmt: skip
# our own modules for features that are off by default, and the repository's tools
OURS_OFF = (
    "loop", "emulators", "bench", "tests", "gateway.upstreams", "gateway.cache.redis_store",
    "gateway.fleet.counters_redis", "gateway.fleet.otlp_forward", "gateway.fleet.otlp_intake",
    "gateway.fleet.otlp_decode", "gateway.fleet.signin_routes", "gateway.fleet.signin_service",
    "gateway.fleet.oidc_client", "gateway.providers.bedrock", "gateway.providers.vertex",
    "gateway.providers.foundry", "gateway.providers.aws_egress", "gateway.providers.requests_egress",
    "gateway.config_docs",  # serve --help only
)  # fmt: skip


def loaded(environ: dict[str, str]) -> tuple[list[str], bool]:
    result = subprocess.run(
        [sys.executable, "-c", PROBE, orjson.dumps(environ).decode()],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    out = orjson.loads(result.stdout)
    return out["modules"], out["policy_validator_built"]


def _ours_off(modules: list[str]) -> list[str]:
    return [m for m in modules if any(m == p or m.startswith(p + ".") or m.startswith(p + "_") for p in OURS_OFF)]


@pytest.fixture(scope="module")
def first_party() -> tuple[list[str], bool]:
    return loaded(FIRST_PARTY)


def test_first_party_gateway_loads_no_optional_dependency(first_party: tuple[list[str], bool]) -> None:
    modules, _ = first_party
    assert sorted({m.split(".")[0] for m in modules} & HEAVY) == []


def test_first_party_gateway_loads_no_module_of_a_feature_that_is_off(first_party: tuple[list[str], bool]) -> None:
    modules, _ = first_party
    assert _ours_off(modules) == []


def test_policy_file_validator_is_built_only_for_a_policy_file(first_party: tuple[list[str], bool]) -> None:
    assert first_party[1] is False


def test_the_probe_sees_what_a_configured_feature_loads() -> None:
    """The probe is not blind: a Bedrock gateway loads botocore and the Bedrock provider."""
    modules, _ = loaded({**FIRST_PARTY, "CLAUDE_CODE_USE_BEDROCK": "1", "AWS_REGION": "us-east-1"})
    assert "botocore" in {m.split(".")[0] for m in modules}
    assert "gateway.providers.bedrock" in modules
