"""Known secrets in every credential variable the gateway reads never come out of it.

Every credential variable of ``gateway/config.py`` (the ``SecretStr`` settings, the URLs that may
carry userinfo, the files holding keys) and the ones the cloud SDKs read (``AWS_SECRET_ACCESS_KEY``,
``AWS_SESSION_TOKEN``) gets a fresh random secret. Each configuration is a real
``python -m gateway serve`` process, in front of the emulators (recording every upstream request),
squid (proxy authentication) and a password-protected redis-server, in three kinds:

* **good**: the gateway serves with the configuration's secrets in use, and a set of requests is
  made (messages, streaming, count_tokens, models, the session endpoint, a wrong key, a body that
  is not JSON, an upstream 400, ``/metrics`` with a client key and with the metrics key);
* **bad**: the same variables plus one other invalid variable (``GATEWAY_PORT=eighty``): exit 2;
* **malformed**: every credential variable of the configuration set to a malformed value that holds
  its secret (a control character or a space in a key, a URL with a bad port or scheme, a key
  file that is not one): exit 2 with one line per variable; the malformations only the provider
  finds (a service-account key that is not a key, an AWS secret key the upstream refuses) run as
  their own configurations.

No secret, nor the Basic form of URL userinfo, nor a line of a private key, appears in the
process's stdout or stderr (start-up output and every log line, the access log included), in any
response (bodies and headers), in ``/metrics``, nor in any request an upstream received, except
the one header each upstream credential is for (``x-api-key`` for ``ANTHROPIC_API_KEY``...).
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from gateway.emulator import EmulatorConfig, RunningEmulator, run_emulator
from gateway.emulator.bedrock_config import BedrockOptions
from tests.providers.bedrock_harness import serve_bedrock_emulator
from tests.support.squid import USER as PROXY_USER
from tests.support.squid import Squid, run_squid
from tests.support.threaded import LoopThread
from tests.support.tls import make_pki

MODEL = "claude-sonnet-4-6"
VERTEX_PROJECT = "hygiene-project"
VERTEX_REGION = "us-east5"
VERTEX_ACCOUNT = f"gateway@{VERTEX_PROJECT}.iam.gserviceaccount.com"
ACCESS_KEY_ID = "AKIAHYGIENETEST00001"
SESSION = "hygiene-session"
START_TIMEOUT_S = 120.0


def _secret(name: str) -> str:
    return f"{name.lower().replace('_', '')[:10]}{secrets.token_hex(12)}"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _pem_lines(pem: str) -> set[str]:
    """The lines of a PEM block's body that are long enough to identify it."""
    return {line.strip() for line in pem.splitlines() if len(line.strip()) >= 20 and "-----" not in line}


def _basic(user: str, password: str) -> str:
    return base64.b64encode(f"{user}:{password}".encode()).decode()


# -- the world: emulators, squid, redis -------------------------------------------------------------


@dataclass
class World:
    directory: Path
    secrets: dict[str, str]
    forms: dict[str, set[str]]  # variable -> every form of its secret that must not leak
    anthropic: RunningEmulator
    bedrock: RunningEmulator
    vertex: RunningEmulator
    foundry: RunningEmulator
    squid: Squid
    redis_port: int
    key_file: Path
    client_cert: Path
    client_key: Path
    vertex_key_file: Path

    @property
    def emulators(self) -> list[RunningEmulator]:
        return [self.anthropic, self.bedrock, self.vertex, self.foundry]


VARIABLES = (
    "GATEWAY_API_KEYS",
    "GATEWAY_METRICS_API_KEYS",
    "GATEWAY_API_KEYS_FILE",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "HTTPS_PROXY",
    "HTTP_PROXY",
    "GATEWAY_SESSION_STORE",
    "GATEWAY_CLIENT_KEY",
    "AWS_BEARER_TOKEN_BEDROCK",
    "ANTHROPIC_BEDROCK_BASE_URL",
    "GATEWAY_BEDROCK_CONTROL_URL",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "ANTHROPIC_VERTEX_BASE_URL",
    "ANTHROPIC_FOUNDRY_API_KEY",
    "ANTHROPIC_FOUNDRY_BASE_URL",
)
URL_VARIABLES = {
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_BEDROCK_BASE_URL",
    "GATEWAY_BEDROCK_CONTROL_URL",
    "ANTHROPIC_VERTEX_BASE_URL",
    "ANTHROPIC_FOUNDRY_BASE_URL",
}
# the upstream request headers a secret is meant for (anywhere else upstream it is a leak)
SENT_AS = {
    "ANTHROPIC_API_KEY": {"x-api-key"},
    "ANTHROPIC_AUTH_TOKEN": {"authorization"},
    "AWS_BEARER_TOKEN_BEDROCK": {"authorization"},
    "AWS_SESSION_TOKEN": {"x-amz-security-token"},
    "ANTHROPIC_FOUNDRY_API_KEY": {"x-api-key", "api-key"},
}


def _redis(directory: Path, password: str) -> tuple[subprocess.Popen[bytes], int]:
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    port = _free_port()
    process = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--requirepass",
            password,
            "--dir",
            str(directory),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), 0.2) as sock:
                sock.sendall(f"AUTH {password}\r\nPING\r\n".encode())
                replies = b""
                while b"+PONG" not in replies and (chunk := sock.recv(64)):
                    replies += chunk
                if b"+PONG" in replies:
                    return process, port
        except OSError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError("redis-server did not start")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    directory = tmp_path_factory.mktemp("hygiene")
    values = {name: _secret(name) for name in VARIABLES}
    forms = {name: {value} for name, value in values.items()}
    for name in URL_VARIABLES:
        forms[name].add(_basic("user", values[name]))
    key_file = directory / "api-keys"
    key_file.write_text(f"# team keys\n{values['GATEWAY_API_KEYS_FILE']} filed-team\n")
    (directory / "pki").mkdir()
    pki = make_pki(directory / "pki")
    forms["GATEWAY_CLIENT_KEY"] = _pem_lines(pki.client_key.read_text())
    account_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private_pem = account_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    forms["GOOGLE_APPLICATION_CREDENTIALS"] = _pem_lines(private_pem)
    public_pem = (
        account_key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    redis_process, redis_port = _redis(directory, values["GATEWAY_SESSION_STORE"])
    loop = LoopThread()
    try:
        anthropic = loop.enter(
            run_emulator(
                EmulatorConfig(
                    api_keys=frozenset({values["ANTHROPIC_API_KEY"], values["ANTHROPIC_AUTH_TOKEN"]})
                )
            )
        )
        bedrock = loop.enter(
            serve_bedrock_emulator(
                options=BedrockOptions(
                    credentials={ACCESS_KEY_ID: values["AWS_SECRET_ACCESS_KEY"]},
                    api_keys=frozenset({values["AWS_BEARER_TOKEN_BEDROCK"]}),
                )
            )
        )
        vertex = loop.enter(
            run_emulator(
                EmulatorConfig(
                    vertex_projects=frozenset({VERTEX_PROJECT}),
                    vertex_locations=frozenset({VERTEX_REGION}),
                    vertex_tokens=frozenset(),
                    vertex_service_accounts={VERTEX_ACCOUNT: public_pem},
                ),
                provider="vertex",
            )
        )
        foundry = loop.enter(
            run_emulator(
                EmulatorConfig(foundry_api_keys=frozenset({values["ANTHROPIC_FOUNDRY_API_KEY"]})),
                provider="foundry",
            )
        )
        squid = loop.enter(run_squid(allowed_ports=[anthropic.port]))
        values["HTTPS_PROXY"] = values["HTTP_PROXY"] = squid.password  # one squid, one password
        forms["HTTPS_PROXY"] = forms["HTTP_PROXY"] = {squid.password, _basic(PROXY_USER, squid.password)}
        vertex_key_file = directory / "service-account.json"
        vertex_key_file.write_text(
            json.dumps(
                {
                    "type": "service_account",
                    "project_id": VERTEX_PROJECT,
                    "private_key_id": "0000000000000000",
                    "private_key": private_pem,
                    "client_email": VERTEX_ACCOUNT,
                    "client_id": "100000000000000000001",
                    "token_uri": vertex.base_url + "/token",
                }
            )
        )
        yield World(
            directory,
            values,
            forms,
            anthropic,
            bedrock,
            vertex,
            foundry,
            squid,
            redis_port,
            key_file,
            pki.client_cert,
            pki.client_key,
            vertex_key_file,
        )
    finally:
        loop.close()
        redis_process.terminate()
        redis_process.wait(10)


# -- configurations ---------------------------------------------------------------------------------


def _userinfo(url: str, password: str) -> str:
    scheme, _, rest = url.partition("://")
    return f"{scheme}://user:{password}@{rest}"


def _common(w: World) -> dict[str, str]:
    s = w.secrets
    return {
        "GATEWAY_API_KEYS": s["GATEWAY_API_KEYS"],
        "GATEWAY_METRICS_API_KEYS": s["GATEWAY_METRICS_API_KEYS"],
        "GATEWAY_API_KEYS_FILE": str(w.key_file),
        "GATEWAY_MAX_RETRIES": "0",
        "GATEWAY_DRAIN_TIMEOUT_S": "2",
    }


def _aws_files(w: World) -> dict[str, str]:
    for name in ("aws-config", "aws-credentials"):
        (w.directory / name).touch()
    return {
        "AWS_CONFIG_FILE": str(w.directory / "aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(w.directory / "aws-credentials"),
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_REGION": "us-east-1",
        "GATEWAY_PROVIDER": "bedrock",
    }


def anthropic_key(w: World) -> dict[str, str]:
    s = w.secrets
    return {
        **_common(w),
        "ANTHROPIC_API_KEY": s["ANTHROPIC_API_KEY"],
        "ANTHROPIC_BASE_URL": _userinfo(w.anthropic.base_url, s["ANTHROPIC_BASE_URL"]),
        "HTTP_PROXY": w.squid.url(),
        "HTTPS_PROXY": w.squid.url(),
        "GATEWAY_SESSION_STORE": f"redis://:{s['GATEWAY_SESSION_STORE']}@127.0.0.1:{w.redis_port}/0",
        "GATEWAY_CLIENT_CERT": str(w.client_cert),
        "GATEWAY_CLIENT_KEY": str(w.client_key),
    }


def anthropic_token(w: World) -> dict[str, str]:
    s = w.secrets
    return {
        **_common(w),
        "ANTHROPIC_AUTH_TOKEN": s["ANTHROPIC_AUTH_TOKEN"],
        "ANTHROPIC_BASE_URL": _userinfo(w.anthropic.base_url, s["ANTHROPIC_BASE_URL"]),
    }


def bedrock_bearer(w: World) -> dict[str, str]:
    s = w.secrets
    return {
        **_common(w),
        **_aws_files(w),
        "AWS_BEARER_TOKEN_BEDROCK": s["AWS_BEARER_TOKEN_BEDROCK"],
        "ANTHROPIC_BEDROCK_BASE_URL": _userinfo(w.bedrock.base_url, s["ANTHROPIC_BEDROCK_BASE_URL"]),
    }


def bedrock_sigv4(w: World) -> dict[str, str]:
    s = w.secrets
    return {
        **_common(w),
        **_aws_files(w),
        "AWS_ACCESS_KEY_ID": ACCESS_KEY_ID,
        "AWS_SECRET_ACCESS_KEY": s["AWS_SECRET_ACCESS_KEY"],
        "AWS_SESSION_TOKEN": s["AWS_SESSION_TOKEN"],
        "ANTHROPIC_BEDROCK_BASE_URL": _userinfo(w.bedrock.base_url, s["ANTHROPIC_BEDROCK_BASE_URL"]),
        "GATEWAY_BEDROCK_CONTROL_URL": _userinfo(w.bedrock.base_url, s["GATEWAY_BEDROCK_CONTROL_URL"]),
        "GATEWAY_MODEL_DISCOVERY": "1",
        "GATEWAY_MODEL_DISCOVERY_INTERVAL_S": "0",
    }


def vertex(w: World) -> dict[str, str]:
    s = w.secrets
    return {
        **_common(w),
        "GATEWAY_PROVIDER": "vertex",
        "CLOUD_ML_REGION": VERTEX_REGION,
        "ANTHROPIC_VERTEX_PROJECT_ID": VERTEX_PROJECT,
        "ANTHROPIC_VERTEX_BASE_URL": _userinfo(w.vertex.base_url + "/v1", s["ANTHROPIC_VERTEX_BASE_URL"]),
        "GOOGLE_APPLICATION_CREDENTIALS": str(w.vertex_key_file),
    }


def foundry(w: World) -> dict[str, str]:
    s = w.secrets
    return {
        **_common(w),
        "GATEWAY_PROVIDER": "foundry",
        "ANTHROPIC_FOUNDRY_API_KEY": s["ANTHROPIC_FOUNDRY_API_KEY"],
        "ANTHROPIC_FOUNDRY_BASE_URL": _userinfo(
            w.foundry.base_url + "/anthropic", s["ANTHROPIC_FOUNDRY_BASE_URL"]
        ),
    }


GOOD: dict[str, Callable[[World], dict[str, str]]] = {
    "anthropic-key": anthropic_key,
    "anthropic-token": anthropic_token,
    "bedrock-bearer": bedrock_bearer,
    "bedrock-sigv4": bedrock_sigv4,
    "vertex": vertex,
    "foundry": foundry,
}


def _not_a_key(w: World, name: str, secret: str) -> Path:
    path = w.directory / name
    path.write_text(f"-----BEGIN PRIVATE KEY-----\n{secret}\n-----END PRIVATE KEY-----\n")
    return path


def malformed(w: World, env: dict[str, str]) -> tuple[dict[str, str], set[str]]:
    """``env`` with each of its credential variables malformed around its secret; the variables
    expected in the error lines."""
    s = w.secrets
    bad_keys = w.directory / "bad-api-keys"
    bad_keys.write_text(f"{s['GATEWAY_API_KEYS_FILE']} filed-team role=admin\n")
    broken = {
        "GATEWAY_API_KEYS": f"{s['GATEWAY_API_KEYS']}\tx",
        "GATEWAY_METRICS_API_KEYS": f"{s['GATEWAY_METRICS_API_KEYS']}\u00e9",
        "GATEWAY_API_KEYS_FILE": str(bad_keys),
        "ANTHROPIC_API_KEY": f"{s['ANTHROPIC_API_KEY']}\n",
        "ANTHROPIC_AUTH_TOKEN": f"Bearer {s['ANTHROPIC_AUTH_TOKEN']}",
        "ANTHROPIC_BASE_URL": f"https://user:{s['ANTHROPIC_BASE_URL']}@api.example:99999",
        "HTTPS_PROXY": f"socks5://{PROXY_USER}:{s['HTTPS_PROXY']}@proxy.example:1080",
        "HTTP_PROXY": f"http://{PROXY_USER}:{s['HTTP_PROXY']}@proxy.example:31280x",
        "GATEWAY_SESSION_STORE": f"redis://:{s['GATEWAY_SESSION_STORE']}@127.0.0.1:63x79/0",
        "GATEWAY_CLIENT_KEY": str(_not_a_key(w, "not-a-key.pem", s["GATEWAY_CLIENT_KEY"])),
        "AWS_BEARER_TOKEN_BEDROCK": f"{s['AWS_BEARER_TOKEN_BEDROCK']}\r",
        "ANTHROPIC_BEDROCK_BASE_URL": f"ftp://user:{s['ANTHROPIC_BEDROCK_BASE_URL']}@bedrock.example",
        "GATEWAY_BEDROCK_CONTROL_URL": f"https://user:{s['GATEWAY_BEDROCK_CONTROL_URL']}@[::1",
        "ANTHROPIC_VERTEX_BASE_URL": f"https://user:{s['ANTHROPIC_VERTEX_BASE_URL']}@vertex.example:0x1/v1",
        "ANTHROPIC_FOUNDRY_API_KEY": f"{s['ANTHROPIC_FOUNDRY_API_KEY']}\x7f",
        "ANTHROPIC_FOUNDRY_BASE_URL": f"https://user:{s['ANTHROPIC_FOUNDRY_BASE_URL']}@f.example:99999/x",
    }
    changed = {name: value for name, value in broken.items() if name in env}
    # the keys file is read only once the key variables are good: it has a configuration of its own
    return {**env, **changed}, set(changed) - {"GATEWAY_API_KEYS_FILE"}


# -- running gateways --------------------------------------------------------------------------------


@dataclass
class Run:
    name: str
    kind: str  # good | bad | malformed | refused
    env: dict[str, str]
    process: subprocess.Popen[bytes]
    output: Path
    port: int
    expected_lines: set[str] = field(default_factory=set)
    seen: list[str] = field(default_factory=list)  # everything the gateway answered
    statuses: dict[str, int] = field(default_factory=dict)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def text(self) -> str:
        return self.output.read_text(errors="replace")


def _start(w: World, name: str, kind: str, env: dict[str, str], expected: set[str] | None = None) -> Run:
    port = _free_port()
    environ = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "GATEWAY_HOST": "127.0.0.1",
        "GATEWAY_PORT": str(port),
        **env,
    }
    if "PYTHONPATH" in os.environ:
        environ["PYTHONPATH"] = os.environ["PYTHONPATH"]
    output = w.directory / f"{name}.{kind}.out"
    with output.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "gateway", "serve"], env=environ, stdout=sink, stderr=subprocess.STDOUT
        )
    return Run(name, kind, env, process, output, port, expected or set())


def _ready(run: Run) -> bool:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if run.process.poll() is not None:
            return False
        try:
            if requests.get(run.base_url + "/healthz", timeout=2).status_code == 200:
                return True
        except requests.RequestException:
            pass
        time.sleep(0.1)
    return False


def _exercise(run: Run, w: World) -> None:
    """The requests of a good configuration; every answer goes to ``run.seen``."""
    client = {"x-api-key": w.secrets["GATEWAY_API_KEYS"], "anthropic-version": "2023-06-01"}
    filed = {**client, "x-api-key": w.secrets["GATEWAY_API_KEYS_FILE"], "x-claude-code-session-id": SESSION}
    system = [{"type": "text", "text": "Be brief. " * 400, "cache_control": {"type": "ephemeral"}}]
    body: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 16,
        "system": system,
        "messages": [{"role": "user", "content": "hi"}],
    }
    calls: dict[str, tuple[str, str, dict[str, str], Any]] = {
        "messages": ("POST", "/v1/messages", filed, body),
        "stream": ("POST", "/v1/messages", filed, {**body, "stream": True}),
        "count_tokens": (
            "POST",
            "/v1/messages/count_tokens",
            client,
            {"model": MODEL, "messages": body["messages"]},
        ),
        "models": ("GET", "/v1/models", client, None),
        "wrong_key": ("POST", "/v1/messages", {**client, "x-api-key": "sk-not-a-key"}, body),
        "not_json": ("POST", "/v1/messages", {**client, "content-type": "application/json"}, b"{not json"),
        "upstream_400": ("POST", "/v1/messages", client, {"model": MODEL, "messages": body["messages"]}),
        "session": ("GET", f"/v1/sessions/{SESSION}", filed, None),
        "no_session": ("GET", "/v1/sessions/never-seen", client, None),
        "metrics_client_key": ("GET", "/metrics", client, None),
        "metrics": (
            "GET",
            "/metrics",
            {"authorization": f"Bearer {w.secrets['GATEWAY_METRICS_API_KEYS']}"},
            None,
        ),
        "readyz": ("GET", "/readyz", {}, None),
    }
    with requests.Session() as http:
        for label, (method, path, headers, payload) in calls.items():
            options: dict[str, Any] = {"headers": headers, "timeout": 60}
            if isinstance(payload, bytes):
                options["data"] = payload
            elif payload is not None:
                options["json"] = payload
            response = http.request(method, run.base_url + path, **options)
            run.statuses[label] = response.status_code
            run.seen.append(f"{label} {response.status_code} {dict(response.headers)}\n{response.text}")


@pytest.fixture(scope="module")
def runs(world: World) -> Iterator[list[Run]]:
    """Every configuration's gateway, all started at once; good ones exercised, then stopped."""
    started: list[Run] = []
    for name, build in GOOD.items():
        env = build(world)
        started.append(_start(world, name, "good", env))
        started.append(_start(world, name, "bad", {**env, "GATEWAY_PORT": "eighty"}, {"GATEWAY_PORT"}))
        broken, expected = malformed(world, env)
        started.append(_start(world, name, "malformed", broken, expected))
    # malformations only the provider finds: it starts and refuses, or serves and fails upstream
    not_a_key = world.directory / "not-a-service-account.json"
    not_a_key.write_text(
        world.vertex_key_file.read_text().replace(
            json.dumps(json.loads(world.vertex_key_file.read_text())["private_key"])[1:-1],
            f"-----BEGIN PRIVATE KEY-----\\n{world.secrets['GOOGLE_APPLICATION_CREDENTIALS']}\\n-----END PRIVATE KEY-----\\n",
        )
    )
    started.append(
        _start(
            world, "vertex", "refused", {**vertex(world), "GOOGLE_APPLICATION_CREDENTIALS": str(not_a_key)}
        )
    )
    bad_file = malformed(world, anthropic_key(world))[0]["GATEWAY_API_KEYS_FILE"]
    keys_file = {**anthropic_key(world), "GATEWAY_API_KEYS_FILE": bad_file}
    started.append(_start(world, "keys-file", "malformed", keys_file, {"GATEWAY_API_KEYS_FILE"}))
    wrong = {**bedrock_sigv4(world), "AWS_SECRET_ACCESS_KEY": world.secrets["AWS_SECRET_ACCESS_KEY"][::-1]}
    world.forms["AWS_SECRET_ACCESS_KEY"].add(wrong["AWS_SECRET_ACCESS_KEY"])
    started.append(_start(world, "bedrock-wrong-secret", "good", wrong))
    try:
        for run in started:
            if run.kind == "good":
                assert _ready(run), f"{run.name} did not start:\n{run.text()[-3000:]}"
                _exercise(run, world)
        for run in started:
            if run.process.poll() is None:
                run.process.send_signal(signal.SIGTERM)
        for run in started:
            run.process.wait(START_TIMEOUT_S)
        yield started
    finally:
        for run in started:
            if run.process.poll() is None:
                run.process.kill()
                run.process.wait(10)


# -- what must hold ---------------------------------------------------------------------------------


def _leaks(world: World, text: str) -> list[str]:
    return sorted(name for name, forms in world.forms.items() if any(form in text for form in forms))


def test_good_configurations_serve_with_every_secret_in_use(runs: list[Run], world: World) -> None:
    for run in runs:
        if run.kind != "good" or run.name == "bedrock-wrong-secret":
            continue
        assert run.process.returncode == 0, run.text()[-3000:]
        expected = {"messages": 200, "stream": 200, "wrong_key": 401, "not_json": 400, "upstream_400": 400}
        expected |= {
            "session": 200,
            "no_session": 404,
            "metrics_client_key": 403,
            "metrics": 200,
            "readyz": 200,
        }
        assert {k: run.statuses[k] for k in expected} == expected, (run.name, run.text()[-3000:])
        ignored = sorted(name for name in URL_VARIABLES if name in run.env)
        for variable in ignored:
            assert f"{variable}: the credentials in the URL (user:password@) are ignored" in run.text()
    # the credentials really were used: each upstream saw its own
    sent = {k.lower(): v for e in world.emulators for r in e.requests for k, v in r.headers}
    assert sent.get("x-amz-security-token") == world.secrets["AWS_SESSION_TOKEN"]
    bearer = {
        v for e in world.emulators for r in e.requests for k, v in r.headers if k.lower() == "authorization"
    }
    assert f"Bearer {world.secrets['ANTHROPIC_AUTH_TOKEN']}" in bearer
    assert f"Bearer {world.secrets['AWS_BEARER_TOKEN_BEDROCK']}" in bearer


def test_bad_and_malformed_configurations_fail_naming_every_variable(runs: list[Run]) -> None:
    for run in runs:
        if run.kind not in ("bad", "malformed", "refused"):
            continue
        text = run.text()
        assert run.process.returncode == 2, (run.name, run.kind, text[-3000:])
        assert "Traceback" not in text, text
        problems = [
            line for line in text.splitlines() if line.startswith("switchyard: configuration error: ")
        ]
        named = {line.removeprefix("switchyard: configuration error: ").split(":")[0] for line in problems}
        if run.kind == "refused":
            assert named == {"GOOGLE_APPLICATION_CREDENTIALS"}, text
        else:
            assert run.expected_lines <= named, (run.name, run.kind, sorted(run.expected_lines - named), text)


def test_no_secret_in_output_logs_metrics_or_answers(runs: list[Run], world: World) -> None:
    checked = 0
    for run in runs:
        assert _leaks(world, run.text()) == [], (
            f"{run.name} ({run.kind}) printed a secret:\n{run.text()[-3000:]}"
        )
        for answer in run.seen:
            assert _leaks(world, answer) == [], f"{run.name} answered a secret:\n{answer[:3000]}"
        checked += 1
    assert checked == 3 * len(GOOD) + 3
    scraped = [answer for run in runs for answer in run.seen if answer.startswith("metrics 200")]
    assert len(scraped) == len(GOOD) + 1 and all("gateway_requests_total" in text for text in scraped)


def test_no_secret_reaches_an_upstream_but_its_own_credential_header(runs: list[Run], world: World) -> None:
    requests_seen = [r for e in world.emulators for r in e.requests]
    assert len(requests_seen) >= 2 * len(GOOD)
    for request in requests_seen:
        for name, value in request.headers:
            for variable in _leaks(world, value):
                assert name.lower() in SENT_AS.get(variable, set()), f"{variable} upstream in {name}"
        assert _leaks(world, request.body.decode("utf-8", "replace")) == [], request.path
