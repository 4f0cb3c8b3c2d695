"""Credentials per upstream: two Bedrock upstreams in two AWS accounts (and a third with its own API
key file) served by one gateway at once; two Vertex AI upstreams with their own service-account key
files and a Foundry upstream with its key file.

Each account is a Bedrock emulator that knows only its own account's keys (its ``BedrockOptions``,
not the gateway's settings) and verifies SigV4 with botocore, so a request signed with the other
account's key is refused. The process environment holds a third, unknown access key and empty
shared files: an upstream's profile and files come from its own entry, never from there.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anthropic
import pytest

from emulators import EmulatorConfig, ManualClock, RunningEmulator, service_accounts
from emulators.bedrock_config import BedrockOptions
from emulators.upstreams import VERTEX_ACCOUNT, VERTEX_PROJECT, emulated_upstream
from gateway.app import create_app
from gateway.config import ConfigError, Settings
from gateway.process import RunningServer, running
from gateway.upstreams.config import load_upstreams
from tests.providers.bedrock_harness import isolated_aws_files, serve_bedrock_emulator
from tests.upstreams.harness import CLIENT_KEY, MODEL, entry

pytestmark = pytest.mark.timeout(60)
ACCOUNT_A = ("AKIAACCOUNTA00000001", "secret/of+account+A0000000000000000000001")
ACCOUNT_B = ("AKIAACCOUNTB00000002", "secret/of+account+B0000000000000000000002")
PROCESS_KEY = ("AKIAPROCESSWIDE00003", "secret/of+the+process+environment0000003")
API_KEY_C = "bedrock-api-key-of-account-c"
STORM = "fail_first=1000000:529,retry_after_ms=1"
CREDENTIAL = re.compile(r"Credential=([A-Z0-9]+)/")


def _profiles(path: Path, profiles: dict[str, tuple[str, str]]) -> Path:
    path.write_text(
        "".join(
            f"[{name}]\naws_access_key_id = {key}\naws_secret_access_key = {secret}\n\n"
            for name, (key, secret) in profiles.items()
        )
    )
    return path


def _signers(emulator: RunningEmulator) -> list[str]:
    """Who signed each Messages request the emulator received (access key id, or ``bearer:<key>``)."""
    found = []
    for request in emulator.requests:
        if request.method != "POST":
            continue
        authorization = dict((k.lower(), v) for k, v in request.headers)["authorization"]
        match = CREDENTIAL.search(authorization)
        found.append(match.group(1) if match else "bearer:" + authorization.removeprefix("Bearer "))
    return found


@contextlib.asynccontextmanager
async def _accounts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[RunningServer, dict[str, RunningEmulator]]]:
    async with (
        serve_bedrock_emulator(options=BedrockOptions(credentials=dict([ACCOUNT_A]))) as a,
        serve_bedrock_emulator(options=BedrockOptions(credentials=dict([ACCOUNT_B]))) as b,
        serve_bedrock_emulator(options=BedrockOptions(credentials={}, api_keys=frozenset({API_KEY_C}))) as c,
    ):
        ambient = isolated_aws_files(tmp_path)  # empty files: what botocore would read by itself
        for name, value in ambient.items():
            monkeypatch.setenv(name, value)
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", PROCESS_KEY[0])
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", PROCESS_KEY[1])
        shared = _profiles(tmp_path / "shared-credentials", {"account-a": ACCOUNT_A})
        own_b = _profiles(tmp_path / "account-b-credentials", {"account-b": ACCOUNT_B})
        key_c = tmp_path / "account-c-key"
        key_c.write_text(API_KEY_C + "\n")

        def bedrock(name: str, emulator: RunningEmulator, credentials: dict[str, str]) -> dict[str, Any]:
            return {
                "name": name,
                "provider": "bedrock",
                "region": "us-east-1",
                "base_url": emulator.base_url,
                "credentials": credentials,
            }

        upstreams = [
            bedrock("account-a", a, {"AWS_PROFILE": "account-a"}),  # the gateway-wide shared file
            bedrock("account-b", b, {"AWS_PROFILE": "account-b", "AWS_SHARED_CREDENTIALS_FILE": str(own_b)}),
            bedrock("account-c", c, {"GATEWAY_BEDROCK_BEARER_TOKEN_FILE": str(key_c)}),
        ]
        path = tmp_path / "upstreams.json"
        path.write_text(
            json.dumps(
                {
                    "upstreams": upstreams,
                    "routes": [{"models": ["*"], "upstreams": ["account-a", "account-b", "account-c"]}],
                    "failover": {"same_upstream_retries": 0},
                }
            )
        )
        settings = Settings.from_environ(
            {
                "GATEWAY_API_KEYS": CLIENT_KEY,
                "GATEWAY_UPSTREAMS_FILE": str(path),
                "GATEWAY_UPSTREAM_HEADER": "1",
                "GATEWAY_MAX_RETRY_DELAY_S": "0.05",
                "AWS_SHARED_CREDENTIALS_FILE": str(shared),  # the snapshot, not os.environ's empty file
            }
        )
        async with running(create_app(settings), "127.0.0.1", 0) as gateway:
            yield gateway, {"account-a": a, "account-b": b, "account-c": c}


async def test_two_accounts_and_an_api_key_file_serve_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with (
        _accounts(tmp_path, monkeypatch) as (gateway, emulators),
        anthropic.AsyncAnthropic(api_key=CLIENT_KEY, base_url=gateway.base_url, max_retries=0) as client,
    ):
        assert await _served_by(client) == ("account-a", "0")
        emulators["account-a"].set_fault(STORM)
        assert (await _served_by(client))[0] == "account-b"
        emulators["account-b"].set_fault(STORM)
        assert (await _served_by(client))[0] == "account-c"
        # each account's emulator saw only its own credential, each signature verified (a 403
        # would have moved the request on, and shown up here as a second signer)
        assert _signers(emulators["account-a"]) == [ACCOUNT_A[0]] * 3  # 1 served, then 2 tried (529)
        assert _signers(emulators["account-b"]) == [ACCOUNT_B[0]] * 2  # 1 served, then 1 tried (529)
        assert _signers(emulators["account-c"]) == ["bearer:" + API_KEY_C]


def test_an_api_key_file_is_checked_per_upstream(tmp_path: Path) -> None:
    empty = tmp_path / "empty-key"
    empty.write_text("\n")
    entries = [
        {"name": "both", "provider": "bedrock", "region": "us-east-1"},
        {"name": "empty", "provider": "bedrock", "region": "us-east-1"},
    ]
    entries[0]["credentials"] = {
        "GATEWAY_BEDROCK_BEARER_TOKEN_FILE": str(empty),
        "AWS_BEARER_TOKEN_BEDROCK": "bedrock-key-that-must-not-leak",
    }
    entries[1]["credentials"] = {"GATEWAY_BEDROCK_BEARER_TOKEN_FILE": str(empty)}
    path = tmp_path / "upstreams.json"
    path.write_text(json.dumps({"upstreams": entries}))
    with pytest.raises(ConfigError) as info:
        load_upstreams(path, {"GATEWAY_API_KEYS": CLIENT_KEY})
    assert info.value.problems == (
        "GATEWAY_UPSTREAMS_FILE: upstreams[0] (both): GATEWAY_BEDROCK_BEARER_TOKEN_FILE: set it or "
        "AWS_BEARER_TOKEN_BEDROCK, not both",
        "GATEWAY_UPSTREAMS_FILE: upstreams[1] (empty): GATEWAY_BEDROCK_BEARER_TOKEN_FILE: the file must "
        "hold one key on one line",
    )


def test_a_profile_missing_from_its_files_is_a_one_line_start_up_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in isolated_aws_files(tmp_path).items():
        monkeypatch.setenv(name, value)
    own = _profiles(tmp_path / "account-b-credentials", {"account-b": ACCOUNT_B})
    entries = [
        {
            "name": "account-b",
            "provider": "bedrock",
            "region": "us-east-1",
            "credentials": {"AWS_PROFILE": "account-b", "AWS_SHARED_CREDENTIALS_FILE": str(own)},
        },
        {
            "name": "account-x",
            "provider": "bedrock",
            "region": "us-east-1",
            "credentials": {"AWS_PROFILE": "account-x", "AWS_SHARED_CREDENTIALS_FILE": str(own)},
        },
    ]
    path = tmp_path / "upstreams.json"
    path.write_text(json.dumps({"upstreams": entries}))
    settings = Settings.from_environ({"GATEWAY_API_KEYS": CLIENT_KEY, "GATEWAY_UPSTREAMS_FILE": str(path)})
    with pytest.raises(ConfigError) as info:
        create_app(settings)
    assert info.value.problems == (
        "GATEWAY_UPSTREAMS_FILE: upstreams[1] (account-x): AWS_PROFILE: no profile 'account-x' in the "
        "shared config or credentials files",
    )


async def _client_of_gateway(
    stack: contextlib.AsyncExitStack, tmp_path: Path, upstreams: list[dict[str, object]]
) -> anthropic.AsyncAnthropic:
    """An SDK client of an in-process gateway over ``upstreams`` (no same-upstream retries,
    ``x-gateway-upstream`` on), both closed with ``stack``."""
    path = tmp_path / "upstreams.json"
    path.write_text(json.dumps({"upstreams": upstreams, "failover": {"same_upstream_retries": 0}}))
    settings = Settings.from_environ(
        {
            "GATEWAY_API_KEYS": CLIENT_KEY,
            "GATEWAY_UPSTREAMS_FILE": str(path),
            "GATEWAY_UPSTREAM_HEADER": "1",
            "GATEWAY_MAX_RETRY_DELAY_S": "0.05",
        }
    )
    gateway = await stack.enter_async_context(running(create_app(settings), "127.0.0.1", 0))
    return await stack.enter_async_context(
        anthropic.AsyncAnthropic(api_key=CLIENT_KEY, base_url=gateway.base_url, max_retries=0)
    )


async def test_two_vertex_accounts_and_a_foundry_key_file(tmp_path: Path) -> None:
    """Each Vertex emulator knows only its own service account's public key (a token minted with
    the other's key file is refused); the Foundry key is only in its file, nowhere in the environment."""
    async with contextlib.AsyncExitStack() as stack:
        emulated = {}
        for name, provider in (("vertex-a", "vertex"), ("vertex-b", "vertex"), ("foundry", "foundry")):
            (tmp_path / name).mkdir()
            emulated[name] = await stack.enter_async_context(emulated_upstream(provider, tmp_path / name))
        key_file = tmp_path / "foundry-key"
        key_file.write_text(emulated["foundry"].env["ANTHROPIC_FOUNDRY_API_KEY"])
        foundry = {
            **entry(emulated["foundry"]),
            "credentials": {"GATEWAY_FOUNDRY_API_KEY_FILE": str(key_file)},
        }
        upstreams = [
            {**entry(emulated["vertex-a"]), "name": "vertex-a"},
            {**entry(emulated["vertex-b"]), "name": "vertex-b"},
            foundry,
        ]
        assert upstreams[0]["credentials"] != upstreams[1]["credentials"]  # a key file each
        client = await _client_of_gateway(stack, tmp_path, upstreams)
        answered = []
        for name in ("vertex-a", "vertex-b", "foundry"):
            raw = await client.messages.with_raw_response.create(
                model=MODEL, max_tokens=16, messages=[{"role": "user", "content": "hi"}]
            )
            assert (await raw.parse()).content
            answered.append(raw.headers["x-gateway-upstream"])
            emulated[name].emulator.set_fault(STORM)  # the next request moves on to the next upstream
        assert answered == ["vertex-a", "vertex-b", "foundry"]


async def _served_by(client: anthropic.AsyncAnthropic) -> tuple[str, str]:
    """``x-gateway-upstream`` and ``x-gateway-retries`` of one successful Messages request."""
    raw = await client.messages.with_raw_response.create(
        model=MODEL, max_tokens=16, messages=[{"role": "user", "content": "hi"}]
    )
    assert (await raw.parse()).content
    return raw.headers["x-gateway-upstream"], raw.headers["x-gateway-retries"]


async def test_each_upstreams_key_file_is_re_read_when_its_upstream_refuses_the_key(tmp_path: Path) -> None:
    """Two Foundry upstreams, a key file each: a key rotated in one upstream (its emulator's own
    configuration) and its file is read anew at the refusal, by that upstream only; the request is
    served by the same upstream after one credential retry, no failover, no restart."""
    async with contextlib.AsyncExitStack() as stack:
        emulated, files = {}, {}
        for name in ("foundry-a", "foundry-b"):
            (tmp_path / name).mkdir()
            emulated[name] = await stack.enter_async_context(emulated_upstream("foundry", tmp_path / name))
            files[name] = tmp_path / name / "mounted-secret"
            files[name].write_text(emulated[name].env["ANTHROPIC_FOUNDRY_API_KEY"] + "\n")
        upstreams = [
            {
                **entry(emulated[name]),
                "name": name,
                "credentials": {"GATEWAY_FOUNDRY_API_KEY_FILE": str(files[name])},
            }
            for name in ("foundry-a", "foundry-b")
        ]
        client = await _client_of_gateway(stack, tmp_path, upstreams)

        def rotate(name: str) -> None:
            new = f"{name}-rotated-key-0002"
            emulated[name].emulator.accept_keys(foundry_api_keys=frozenset({new}))
            files[name].write_text(new + "\n")

        rotate("foundry-a")
        assert await _served_by(client) == ("foundry-a", "1")
        assert await _served_by(client) == ("foundry-a", "0")
        assert emulated["foundry-b"].emulator.requests == []  # a refused key moved nothing
        emulated["foundry-a"].emulator.set_fault(STORM)  # from now on, foundry-b serves
        rotate("foundry-b")
        assert await _served_by(client) == ("foundry-b", "1")
        sent = {
            name: [r.header("x-api-key") for r in emulated[name].emulator.requests if r.method == "POST"]
            for name in emulated
        }
        assert sent == {
            "foundry-a": [emulated["foundry-a"].env["ANTHROPIC_FOUNDRY_API_KEY"]]
            + ["foundry-a-rotated-key-0002"] * 3,
            "foundry-b": [
                emulated["foundry-b"].env["ANTHROPIC_FOUNDRY_API_KEY"],
                "foundry-b-rotated-key-0002",
            ],
        }


async def test_each_vertex_upstreams_credentials_file_is_re_read_when_its_token_is_refused(
    tmp_path: Path,
) -> None:
    """Two Vertex upstreams, a service-account key file each: one account's key is rotated (a new
    key in its emulator's configuration, the old one deleted, the new JSON written over its file)
    and that emulator's clock moves past the token's expiry, so Vertex refuses the token. That
    upstream alone reads its file again and serves the request after one credential retry: no
    failover, no restart."""
    async with contextlib.AsyncExitStack() as stack:
        emulated, clocks = {}, {}
        for name in ("vertex-a", "vertex-b"):
            (tmp_path / name).mkdir()
            clocks[name] = ManualClock(time.time())  # google-auth signs with the real time
            config = EmulatorConfig(clock=clocks[name])
            emulated[name] = await stack.enter_async_context(
                emulated_upstream("vertex", tmp_path / name, config)
            )
        upstreams = [{**entry(emulated[name]), "name": name} for name in ("vertex-a", "vertex-b")]
        client = await _client_of_gateway(stack, tmp_path, upstreams)

        assert await _served_by(client) == ("vertex-a", "0")
        emulator = emulated["vertex-a"].emulator
        token_uri = emulator.base_url + "/token"
        rotated = service_accounts.generate(VERTEX_PROJECT, VERTEX_ACCOUNT, token_uri)
        emulator.accept_keys(vertex_service_accounts={VERTEX_ACCOUNT: rotated.public_key_pem})
        rotated.write(Path(emulated["vertex-a"].env["GOOGLE_APPLICATION_CREDENTIALS"]))
        clocks["vertex-a"].advance(3601)  # the token issued with the old key has expired there
        assert await _served_by(client) == ("vertex-a", "1")
        assert await _served_by(client) == ("vertex-a", "0")
        assert emulated["vertex-b"].emulator.requests == []  # a refused token moved nothing
        tokens = [r for r in emulator.requests if r.path_only == "/token"]
        assert len(tokens) == 2  # the old key's, then the re-read file's
