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

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.e2e.secret_world import (
    GOOD,
    MODEL,
    SENT_AS,
    SESSION,
    START_TIMEOUT_S,
    URL_VARIABLES,
    World,
    anthropic_key,
    bedrock_sigv4,
    built_world,
    malformed,
    vertex,
)
from tests.support.redis_server import free_port


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with built_world(tmp_path_factory.mktemp("hygiene")) as built:
        yield built


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
    port = free_port()
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
        # the fleet's sign-in endpoints (404 where sign-in is off); none contacts the IdP
        "discovery": ("GET", "/.well-known/oauth-authorization-server", {}, None),
        "device_authorization": (
            "POST",
            "/oauth/device_authorization",
            {"content-type": "application/x-www-form-urlencoded"},
            b"surface=claude_code",
        ),
        "device_page": ("GET", "/oauth/device", {}, None),
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
        if run.name.startswith("fleet"):
            expected |= {"discovery": 200, "device_authorization": 200, "device_page": 200}
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
