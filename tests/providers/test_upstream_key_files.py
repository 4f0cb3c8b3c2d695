"""Upstream keys read from files are re-read when the upstream refuses them: a Kubernetes secret
rotated under a running gateway (GATEWAY_FOUNDRY_API_KEY_FILE, GATEWAY_BEDROCK_BEARER_TOKEN_FILE).

The emulators are told to accept only a new key (their own configuration, as a provider's console
revokes a key), the file is rewritten, and the next request through the anthropic SDK gets its
200 after one internal credential retry, with no restart. A file left as it was means the 401 is
relayed once (no loop); an unreadable file keeps the key in use and logs one warning naming the
file, never a key.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import anthropic
import pytest
import requests

from emulators import EmulatorConfig, RunningEmulator, emulator_in_thread
from emulators.bedrock_config import DEFAULT_API_KEY, BedrockOptions, accept_bedrock_api_keys
from gateway.app import create_app
from gateway.config import Settings
from gateway.metrics import GatewayMetrics
from gateway.process import running
from gateway.providers.bedrock import BedrockProvider
from gateway.providers.foundry import FoundryProvider
from tests.providers.bedrock_harness import apply_aws_env, bedrock_upstream
from tests.providers.foundry_harness import foundry_upstream
from tests.providers.key_rotation import MESSAGES, MODEL
from tests.providers.key_rotation import KeyRotationGateway as Gateway

pytestmark = pytest.mark.timeout(60)

GATEWAY_KEY = "sk-gw-key-files"
FOUNDRY_KEY = "foundry-key-original-0001"
NEW_FOUNDRY_KEY = "foundry-key-rotated-0002"
NEW_BEDROCK_KEY = "bedrock-api-key-rotated-0002"


@contextlib.asynccontextmanager
async def _gateway(settings: Settings, provider: FoundryProvider | BedrockProvider) -> AsyncIterator[Gateway]:
    metrics = GatewayMetrics()
    async with (
        running(create_app(settings, provider, metrics=metrics), "127.0.0.1", 0) as server,
        anthropic.AsyncAnthropic(api_key=GATEWAY_KEY, base_url=server.base_url, max_retries=0) as client,
    ):
        yield Gateway(client, metrics, provider.name)


@contextlib.asynccontextmanager
async def _foundry(tmp_path: Path) -> AsyncIterator[tuple[Gateway, RunningEmulator, Path]]:
    """Foundry emulator and a gateway whose Foundry key is only in ``key_file``."""
    key_file = tmp_path / "mounted-secret"
    key_file.write_text(FOUNDRY_KEY + "\n")
    async with foundry_upstream(tmp_path, foundry_api_keys=frozenset({FOUNDRY_KEY})) as (env, emulator):
        del env["ANTHROPIC_FOUNDRY_API_KEY"]
        settings = Settings.from_environ(
            {**env, "GATEWAY_API_KEYS": GATEWAY_KEY, "GATEWAY_FOUNDRY_API_KEY_FILE": str(key_file)}
        )
        async with _gateway(settings, FoundryProvider(settings)) as gateway:
            yield gateway, emulator, key_file


def _foundry_keys(emulator: RunningEmulator) -> list[str | None]:
    return [r.header("x-api-key") for r in emulator.requests if r.method == "POST"]


async def test_a_rotated_foundry_key_file_is_read_at_the_first_refusal(tmp_path: Path) -> None:
    async with _foundry(tmp_path) as (gateway, emulator, key_file):
        assert await gateway.ask() == (200, "0")
        emulator.accept_keys(foundry_api_keys=frozenset({NEW_FOUNDRY_KEY}))  # the old key revoked
        key_file.write_text(NEW_FOUNDRY_KEY + "\n")  # the secret volume updated
        assert await gateway.ask() == (200, "1")
        assert gateway.credential_retries() == 1
        assert await gateway.ask() == (200, "0")  # the new key is the one in use now
        assert _foundry_keys(emulator) == [FOUNDRY_KEY, FOUNDRY_KEY, NEW_FOUNDRY_KEY, NEW_FOUNDRY_KEY]


async def test_requests_refused_together_all_retry_with_the_new_key(tmp_path: Path) -> None:
    """Two requests in flight with the old key when it is revoked: the first refusal reads the
    file, the second finds the new key already in use and retries with it too (not a 401)."""
    async with _foundry(tmp_path) as (gateway, emulator, key_file):
        # both are held 1 s before the emulator checks their key (the second one is sent meanwhile)
        emulator.set_fault("stall_headers=1.0,first=2")
        emulator.accept_keys(foundry_api_keys=frozenset({NEW_FOUNDRY_KEY}))
        key_file.write_text(NEW_FOUNDRY_KEY + "\n")
        assert await asyncio.gather(gateway.ask(), gateway.ask()) == [(200, "1"), (200, "1")]
        assert gateway.credential_retries() == 2
        assert _foundry_keys(emulator) == [FOUNDRY_KEY, FOUNDRY_KEY, NEW_FOUNDRY_KEY, NEW_FOUNDRY_KEY]


async def test_an_unchanged_key_file_relays_the_refusal_without_retrying(tmp_path: Path) -> None:
    async with _foundry(tmp_path) as (gateway, emulator, _):
        emulator.accept_keys(foundry_api_keys=frozenset({NEW_FOUNDRY_KEY}))  # the file not updated yet
        assert await gateway.ask() == (401, "0")
        assert await gateway.ask() == (401, "0")
        assert gateway.credential_retries() == 0
        assert _foundry_keys(emulator) == [FOUNDRY_KEY, FOUNDRY_KEY]  # one attempt each


async def test_an_unreadable_key_file_keeps_the_key_and_warns_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with _foundry(tmp_path) as (gateway, emulator, key_file):
        emulator.accept_keys(foundry_api_keys=frozenset({NEW_FOUNDRY_KEY}))
        key_file.write_text("\n")  # truncated while the secret is being rewritten
        assert await gateway.ask() == (401, "0")
        key_file.unlink()  # then gone: another cause, one more warning
        assert await gateway.ask() == (401, "0")
        assert await gateway.ask() == (401, "0")
        warnings = [r.getMessage() for r in caplog.records if r.name == "switchyard.upstream_keys"]
        assert warnings == [
            f"upstream key file {key_file} (GATEWAY_FOUNDRY_API_KEY_FILE) not re-read (refused by the "
            "upstream): the file must hold one key on one line; keeping the key in use",
            f"upstream key file {key_file} (GATEWAY_FOUNDRY_API_KEY_FILE) not re-read (refused by the "
            "upstream): cannot read it (FileNotFoundError); keeping the key in use",
        ]
        assert _foundry_keys(emulator) == [FOUNDRY_KEY] * 3  # still the key of start-up
        key_file.write_text(NEW_FOUNDRY_KEY)
        assert await gateway.ask() == (200, "1")
    assert FOUNDRY_KEY not in caplog.text and NEW_FOUNDRY_KEY not in caplog.text


async def test_a_rotated_bedrock_api_key_file_is_read_at_the_first_refusal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token_file = tmp_path / "bedrock-token"
    token_file.write_text(DEFAULT_API_KEY + "\n")
    async with bedrock_upstream(tmp_path, options=BedrockOptions(credentials={}), static_keys=False) as (
        env,
        emulator,
    ):
        apply_aws_env(monkeypatch, env)
        settings = Settings.from_environ(
            {**env, "GATEWAY_API_KEYS": GATEWAY_KEY, "GATEWAY_BEDROCK_BEARER_TOKEN_FILE": str(token_file)}
        )
        async with _gateway(settings, BedrockProvider(settings)) as gateway:
            assert await gateway.ask() == (200, "0")
            accept_bedrock_api_keys(emulator.app, frozenset({NEW_BEDROCK_KEY}))
            assert await gateway.ask() == (401, "0")  # the file not updated yet: the refusal relayed
            token_file.write_text(NEW_BEDROCK_KEY + "\n")
            assert await gateway.ask() == (200, "1")
            assert gateway.credential_retries() == 1
            assert await gateway.ask() == (200, "0")
        bearers = [r.header("Authorization") for r in emulator.requests if r.method == "POST"]
        old, new = f"Bearer {DEFAULT_API_KEY}", f"Bearer {NEW_BEDROCK_KEY}"
        assert bearers == [old, old, old, new, new]


def test_sighup_re_reads_the_key_file_of_a_running_process(tmp_path: Path) -> None:
    """``kill -HUP`` puts a rotated key in use before the upstream refuses the old one."""
    key_file, log = tmp_path / "mounted-secret", tmp_path / "gateway.log"
    key_file.write_text(FOUNDRY_KEY + "\n")
    config = EmulatorConfig(foundry_api_keys=frozenset({FOUNDRY_KEY}))
    with emulator_in_thread(config, provider="foundry") as emulator, log.open("wb") as stderr:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        environ = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
            "GATEWAY_PORT": str(port),
            "GATEWAY_API_KEYS": GATEWAY_KEY,
            "GATEWAY_PROVIDER": "foundry",
            "ANTHROPIC_FOUNDRY_BASE_URL": emulator.base_url + "/anthropic",
            "GATEWAY_FOUNDRY_API_KEY_FILE": str(key_file),
        }
        process = subprocess.Popen(
            [sys.executable, "-m", "gateway", "serve"], env=environ, stdout=subprocess.DEVNULL, stderr=stderr
        )
        url = f"http://127.0.0.1:{port}"
        try:
            _until(lambda: _reachable(url), 20)
            assert _post(url) == (200, "0")
            emulator.accept_keys(foundry_api_keys=frozenset({NEW_FOUNDRY_KEY}))
            key_file.write_text(NEW_FOUNDRY_KEY + "\n")
            process.send_signal(signal.SIGHUP)
            _until(lambda: len(_key_lines(log)) == 1)
            assert _post(url) == (200, "0")  # the new key went out first: no refusal, no retry
            process.send_signal(signal.SIGHUP)
            _until(lambda: len(_key_lines(log)) == 2)
            assert process.poll() is None
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    assert _key_lines(log) == [
        f"upstream key re-read from {key_file} (GATEWAY_FOUNDRY_API_KEY_FILE, SIGHUP): a new key is in use",
        f"upstream key file {key_file} (GATEWAY_FOUNDRY_API_KEY_FILE) unchanged (SIGHUP)",
    ]
    assert [r.header("x-api-key") for r in emulator.requests if r.method == "POST"] == [
        FOUNDRY_KEY,
        NEW_FOUNDRY_KEY,
    ]
    text = log.read_text()
    assert FOUNDRY_KEY not in text and NEW_FOUNDRY_KEY not in text


def _post(url: str) -> tuple[int, str]:
    body = {"model": MODEL, "max_tokens": 8, "messages": MESSAGES}
    response = requests.post(url + "/v1/messages", json=body, headers={"x-api-key": GATEWAY_KEY}, timeout=10)
    return response.status_code, response.headers.get("x-gateway-retries", "")


def _key_lines(log: Path) -> list[str]:
    entries = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    return [entry["message"] for entry in entries if entry["logger"] == "switchyard.upstream_keys"]


def _reachable(url: str) -> bool:
    try:
        return requests.get(url + "/healthz", timeout=1).status_code == 200
    except requests.ConnectionError:
        return False


def _until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not true after {timeout_s} s")
        time.sleep(0.02)
