"""The emulator CLI (`python -m emulators`) as a real process: TLS, chunk delay, credentials per provider, the printed
client environment driving a real gateway process, and Vertex service accounts with google-auth."""

from __future__ import annotations

import itertools
import json
import os
import queue
import shlex
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import anthropic
import httpx2 as httpx  # the SDK's HTTP library
import pytest
import requests

from emulators.bedrock_config import DEFAULT_ACCESS_KEY_ID, DEFAULT_SECRET_ACCESS_KEY
from emulators.bedrock_config import DEFAULT_API_KEY as DEFAULT_BEDROCK_KEY
from emulators.config import DEFAULT_API_KEY, DEFAULT_FOUNDRY_KEY, DEFAULT_VERTEX_TOKEN

START_TIMEOUT_S = 60.0
USER: list[anthropic.types.MessageParam] = [{"role": "user", "content": "one two three four five six seven"}]
MODELS = {
    "anthropic": "claude-sonnet-4-6",
    "bedrock": "us.anthropic.claude-sonnet-4-6",
    "vertex": "claude-sonnet-4-5@20250929",
    "foundry": "claude-sonnet-4-6",
}
CLOUD_SCOPE = "https://www.googleapis.com/auth/cloud-platform"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def _base_env(**extra: str) -> dict[str, str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **extra}
    if "PYTHONPATH" in os.environ:
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return env


def _lines(stream: IO[str]) -> queue.Queue[str]:
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        for line in stream:
            lines.put(line.rstrip("\n"))

    threading.Thread(target=pump, daemon=True).start()
    return lines


@dataclass
class Emulator:
    process: subprocess.Popen[str]
    printed: list[str]

    @property
    def base_url(self) -> str:
        return self.printed[0].rsplit(" ", 1)[1]

    @property
    def env(self) -> dict[str, str]:
        """The ``export`` line, parsed as a shell would."""
        words = shlex.split(self.printed[-1])
        assert words[0] == "export"
        return dict(word.split("=", 1) for word in words[1:])


@contextmanager
def _stopping(process: subprocess.Popen[str]) -> Iterator[None]:
    try:
        yield
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextmanager
def emulate(*args: str) -> Iterator[Emulator]:
    """``python -m emulators --port 0 ARGS``, once it printed its ``export`` line."""
    process = subprocess.Popen(
        [sys.executable, "-m", "emulators", "--port", "0", *args],
        env=_base_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    with _stopping(process):
        assert process.stdout is not None
        lines, printed = _lines(process.stdout), []
        deadline = time.monotonic() + START_TIMEOUT_S
        while not printed or not printed[-1].startswith("export "):
            try:
                printed.append(lines.get(timeout=max(deadline - time.monotonic(), 0.01)))
            except queue.Empty:
                pytest.fail(f"emulator printed no export line: {printed} (exit {process.poll()})")
        yield Emulator(process, printed)


@contextmanager
def gateway_process(env: dict[str, str], home: Path) -> Iterator[str]:
    """``switchyard serve`` with ``env`` (plus an inbound key and a port); yields its URL."""
    port = _free_port()
    full = _base_env(
        HOME=str(home), GATEWAY_API_KEYS="sk-client", GATEWAY_PORT=str(port), GATEWAY_MAX_RETRIES="0", **env
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "gateway", "serve"],
        env=full,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    with _stopping(process):
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                if requests.get(url + "/readyz", timeout=2).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                stderr = process.stderr.read() if process.stderr else ""
                pytest.fail(f"gateway did not become ready (exit {process.poll()}): {stderr[-2000:]}")
            time.sleep(0.1)
        yield url


def _trusting(ca: Path) -> httpx.Client:
    return anthropic.DefaultHttpxClient(verify=ssl.create_default_context(cafile=str(ca)))


def _direct_client(provider: str, emu: Emulator, ca: Path, key: str) -> Any:
    """The SDK's own client for ``provider``, aimed at the emulator, trusting only its CA."""
    common: dict[str, Any] = {"max_retries": 0, "http_client": _trusting(ca)}
    if provider == "anthropic":
        return anthropic.Anthropic(api_key=key, base_url=emu.base_url, **common)
    if provider == "foundry":
        return anthropic.AnthropicFoundry(api_key=key, base_url=emu.base_url + "/anthropic", **common)
    if provider == "bedrock":
        return anthropic.AnthropicBedrock(
            api_key=key, aws_region="us-east-1", base_url=emu.base_url, **common
        )
    return anthropic.AnthropicVertex(
        access_token=key, region="us-east5", project_id="p", base_url=emu.base_url + "/v1", **common
    )


DEFAULT_KEYS = {
    "anthropic": DEFAULT_API_KEY,
    "foundry": DEFAULT_FOUNDRY_KEY,
    "bedrock": DEFAULT_BEDROCK_KEY,
    "vertex": DEFAULT_VERTEX_TOKEN,
}


@pytest.mark.parametrize("provider", ["anthropic", "bedrock", "vertex", "foundry"])
def test_tls_api_key_and_printed_env_drive_a_gateway(provider: str, tmp_path: Path) -> None:
    tls = tmp_path / "tls"
    key = f"custom-{provider}-key"
    sigv4 = ["--aws-access-key-id", "AKIDCUSTOM", "--aws-secret-access-key", "custom/secret+key"]
    extra = sigv4 if provider == "bedrock" else []
    with emulate("--provider", provider, "--tls", str(tls), "--api-key", key, *extra) as emu:
        assert emu.base_url.startswith("https://127.0.0.1:")
        assert f"trust: {tls / 'ca.pem'}" in emu.printed[2]
        assert key in emu.printed[1]  # the credentials line names what is accepted

        # HTTPS with the written certificate: the SDK trusting only ca.pem gets through...
        direct = _direct_client(provider, emu, tls / "ca.pem", key)
        assert direct.messages.create(model=MODELS[provider], max_tokens=32, messages=USER).stop_reason
        # ...while the system store does not know the certificate
        with pytest.raises(requests.exceptions.SSLError):
            requests.get(emu.base_url + "/", timeout=5)
        # --api-key replaced the default credential of every provider
        stale = _direct_client(provider, emu, tls / "ca.pem", DEFAULT_KEYS[provider])
        with pytest.raises((anthropic.AuthenticationError, anthropic.PermissionDeniedError)):
            stale.messages.create(model=MODELS[provider], max_tokens=32, messages=USER)

        env = emu.env
        assert env["GATEWAY_PROVIDER"] == provider and env["GATEWAY_CA_BUNDLE"] == str(tls / "ca.pem")
        if provider == "bedrock":  # the SigV4 pair given on the command line, not the defaults
            assert (env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]) == (
                "AKIDCUSTOM",
                "custom/secret+key",
            )
        with gateway_process(env, tmp_path) as url:
            client = anthropic.Anthropic(api_key="sk-client", base_url=url, max_retries=0)
            reply = client.messages.create(model="claude-sonnet-4-5", max_tokens=32, messages=USER)
            assert reply.content[0].type == "text" and reply.content[0].text.startswith("Echo:")


def test_default_bedrock_credentials_and_chunk_delay() -> None:
    delay = 0.25
    with emulate("--provider", "bedrock", "--chunk-delay", str(delay)) as emu:
        env = emu.env
        assert env["AWS_ACCESS_KEY_ID"] == DEFAULT_ACCESS_KEY_ID
        assert env["AWS_SECRET_ACCESS_KEY"] == DEFAULT_SECRET_ACCESS_KEY
        assert DEFAULT_BEDROCK_KEY in emu.printed[1]  # the API key is listed too
        client = anthropic.AnthropicBedrock(
            aws_access_key=env["AWS_ACCESS_KEY_ID"],
            aws_secret_key=env["AWS_SECRET_ACCESS_KEY"],
            aws_region=env["AWS_REGION"],
            base_url=env["ANTHROPIC_BEDROCK_BASE_URL"],
            max_retries=0,
        )
        deltas = []
        requested = time.monotonic()
        with client.messages.stream(model=MODELS["bedrock"], max_tokens=64, messages=USER) as stream:
            for event in stream:
                if event.type == "content_block_delta":
                    deltas.append(time.monotonic())
    # the emulator sleeps before every delta (after the request arrived): a strict lower bound...
    assert len(deltas) >= 3
    assert deltas[-1] - requested >= delay * len(deltas), (requested, deltas)
    # ...and the deltas are spaced out, not all sent after one wait
    assert max(later - earlier for earlier, later in itertools.pairwise(deltas)) >= 0.8 * delay


def test_vertex_service_account_file_works_with_google_auth(tmp_path: Path) -> None:
    from google.auth.transport.requests import Request
    from google.oauth2 import service_account

    key_file = tmp_path / "sa.json"
    tokens = []
    for _ in range(2):  # generated on the first start, registered again (and re-pointed) on the second
        with emulate("--provider", "vertex", "--vertex-service-account", str(key_file)) as emu:
            info = json.loads(key_file.read_text())
            assert info["token_uri"] == emu.base_url + "/token"
            assert emu.env["GOOGLE_APPLICATION_CREDENTIALS"] == str(key_file)
            credentials = service_account.Credentials.from_service_account_file(  # type: ignore[no-untyped-call]
                str(key_file), scopes=[CLOUD_SCOPE]
            )
            credentials.refresh(Request())  # type: ignore[no-untyped-call]
            client = anthropic.AnthropicVertex(
                access_token=credentials.token,
                region=emu.env["CLOUD_ML_REGION"],
                project_id=emu.env["ANTHROPIC_VERTEX_PROJECT_ID"],
                base_url=emu.env["ANTHROPIC_VERTEX_BASE_URL"],
                max_retries=0,
            )
            assert client.messages.create(model=MODELS["vertex"], max_tokens=32, messages=USER).stop_reason
            tokens.append(credentials.token)
    assert tokens[0] != tokens[1]
    assert oct(key_file.stat().st_mode & 0o777) == "0o600"  # it holds a private key


def test_a_bad_option_is_one_line_and_exit_2() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "emulators", "--port", "0", "--chunk-delay", "-1"],
        env=_base_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == ["emulators: error: --chunk-delay: must be >= 0"]
