"""The session store's Redis, as k8s/base/redis.yaml runs it: a real redis-server started with the
manifest's own command, password and probe, and a gateway configured from the Deployment's
environment (kubelet's ``$(REDIS_PASSWORD)`` expansion) sharing sessions through it.

Only the listen address is changed for the test (a free loopback port instead of 6379).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import anthropic
import pytest

from emulators import EmulatorConfig, run_emulator
from gateway.app import create_app
from gateway.config import Settings
from gateway.metrics import GatewayMetrics
from gateway.process import running
from gateway.startup_summary import public_summary
from tests.deploy.manifests import Manifest, gateway_container, one, pod_environment, render
from tests.support import binaries

REDIS = shutil.which("redis-server")
REDIS_CLI = shutil.which("redis-cli")
pytestmark = binaries.skip_unless("redis-server", "redis-cli")

PASSWORD = "5f0c9d2e7a61b4c83e90d1f2a7b6c5d4"  # hex, as the template asks
CLIENT_KEY = "sk-client-session-auth"
UPSTREAM_KEY = "sk-upstream-session-auth"
SERVICE = "switchyard-redis:6379"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def _redis_container() -> Manifest:
    statefulset = one(render("anthropic"), "StatefulSet", "switchyard-redis")
    containers: list[Manifest] = statefulset["spec"]["template"]["spec"]["containers"]
    (container,) = containers
    return container


def _secrets(password: str) -> dict[str, str]:
    return {"redis-password": password, "api-keys": f"{CLIENT_KEY}\n", "anthropic-api-key": UPSTREAM_KEY}


@contextlib.contextmanager
def _redis_as_deployed(tmp_path: Path) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    container = _redis_container()
    port = _free_port()
    command = [*container["command"], *container["args"]]
    assert command[:2] == ["/bin/sh", "-c"] and "exec redis-server - " in command[2]
    script = command[2].replace(
        "exec redis-server - ", f"exec redis-server - --port {port} --bind 127.0.0.1 ", 1
    )
    env = pod_environment([], container, _secrets(PASSWORD))
    process = subprocess.Popen(
        ["/bin/sh", "-c", script],
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env},
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            assert process.poll() is None and time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.02)
        yield port, process
    finally:
        process.terminate()
        process.wait(10)


def _cli(port: int, password: str, *args: str) -> subprocess.CompletedProcess[str]:
    """redis-cli as the readiness probe runs it (REDISCLI_AUTH from the environment)."""
    return subprocess.run(
        [str(REDIS_CLI), "-p", str(port), *args],
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "REDISCLI_AUTH": password},
        capture_output=True,
        text=True,
        timeout=10,
    )


def test_redis_requires_the_password_keeps_protected_mode_and_hides_the_password(tmp_path: Path) -> None:
    container = _redis_container()
    probe = container["readinessProbe"]["exec"]["command"]
    with _redis_as_deployed(tmp_path) as (port, process):
        cmdline = Path(f"/proc/{process.pid}/cmdline").read_bytes()
        assert b"redis-server" in cmdline and PASSWORD.encode() not in cmdline  # not in `ps`
        assert _cli(port, "", "-e", "ping").returncode != 0  # NOAUTH
        assert "WRONGPASS" in _cli(port, "not-it", "ping").stderr + _cli(port, "not-it", "ping").stdout
        # the readiness probe passes with the Secret's password only
        assert probe[:1] == ["redis-cli"]
        assert _cli(port, PASSWORD, *probe[1:]).stdout.strip() == "PONG"
        assert _cli(port, "not-it", *probe[1:]).returncode != 0
        settings = dict(
            zip(*[iter(_cli(port, PASSWORD, "config", "get", "*").stdout.splitlines())] * 2, strict=True)
        )
    assert settings["protected-mode"] == "yes"
    assert settings["requirepass"] == PASSWORD
    assert (settings["maxmemory-policy"], settings["save"], settings["appendonly"]) == (
        "allkeys-lru",
        "",
        "no",
    )


def _gateway_settings(port: int, password: str, emulator_url: str, keys: Path) -> Settings:
    """The gateway's environment as kubelet builds it from the Deployment, pointed at the test's
    Redis and emulator."""
    manifests = render("anthropic")
    env = pod_environment(manifests, gateway_container(manifests), _secrets(password))
    assert env["GATEWAY_SESSION_STORE"] == f"redis://:{password}@{SERVICE}/0"
    env["GATEWAY_SESSION_STORE"] = env["GATEWAY_SESSION_STORE"].replace(SERVICE, f"127.0.0.1:{port}")
    del env["REDIS_PASSWORD"]
    env |= {
        "GATEWAY_API_KEYS_FILE": str(keys),
        "ANTHROPIC_BASE_URL": emulator_url,
        "GATEWAY_HOST": "127.0.0.1",
        "GATEWAY_MAX_RETRIES": "0",
    }
    return Settings.from_environ(env)


async def _two_turns(settings: Settings, metrics: GatewayMetrics) -> None:
    async with running(create_app(settings, metrics=metrics), "127.0.0.1", 0) as gateway:
        client = anthropic.AsyncAnthropic(api_key=CLIENT_KEY, base_url=gateway.base_url, max_retries=0)
        for turn in range(2):
            message = await client.messages.create(
                model="claude-sonnet-4-5",
                max_tokens=16,
                system=[{"type": "text", "text": "Be brief. " * 600, "cache_control": {"type": "ephemeral"}}],
                messages=[{"role": "user", "content": f"turn {turn}"}],
                extra_headers={"X-Claude-Code-Session-Id": "session-auth-test"},
            )
            assert message.content
        await client.close()


async def test_the_gateway_uses_the_password_from_the_secret_and_never_logs_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    keys = tmp_path / "api-keys"
    keys.write_text(f"{CLIENT_KEY}\n")
    with _redis_as_deployed(tmp_path) as (port, _):
        async with run_emulator(EmulatorConfig(api_keys=frozenset({UPSTREAM_KEY}))) as emulator:
            good, bad = GatewayMetrics(), GatewayMetrics()
            settings = _gateway_settings(port, PASSWORD, emulator.base_url, keys)
            await _two_turns(settings, good)
            wrong = _gateway_settings(port, "0badc0de0badc0de", emulator.base_url, keys)
            await _two_turns(wrong, bad)  # a wrong password costs the shared state, not the requests
        stored = _cli(port, PASSWORD, "--scan", "--pattern", "switchyard:sessions:*").stdout.split()
    assert "switchyard:sessions:default:session-auth-test:record" in stored
    assert good.registry.get_sample_value("gateway_session_store_errors_total") == 0
    assert (bad.registry.get_sample_value("gateway_session_store_errors_total") or 0) > 0
    assert any("session store unavailable" in r.getMessage() for r in caplog.records)
    text = "\n".join(r.getMessage() + str(r.exc_info or "") for r in caplog.records)
    text += repr(settings) + str(public_summary(settings)) + repr(wrong) + str(public_summary(wrong))
    for password in (PASSWORD, "0badc0de0badc0de"):
        assert password not in text
