"""Per-provider images: ``docker build --build-arg PROVIDERS=bedrock`` installs only what it runs.

Without a Docker engine, the two halves are checked separately:

* the builder's install step (the Dockerfile's own ``RUN`` text, run by ``/bin/sh``) turns
  ``PROVIDERS`` into the pip requirement and refuses unknown or empty values before pip runs.
  pip is the one stand-in: a script in the venv's place recording its arguments (the real pip
  would need the network); what those extras install is computed from pyproject.toml and the
  distributions' metadata (``tests/deploy/images.py``);
* a real ``switchyard serve`` process, with every module the image would lack made unimportable,
  serves a request for its provider through that provider's emulator and never tries to import
  another provider's SDK; started for a provider the image lacks, it stops with one line.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import anthropic
import pytest

from emulators import EmulatorConfig, run_emulator
from tests.deploy.images import absent_modules, as_if_installed, distribution_modules, distributions
from tests.deploy.manifests import ROOT
from tests.deploy.test_image import _instructions, _stages
from tests.providers.bedrock_harness import bedrock_upstream
from tests.providers.foundry_harness import foundry_upstream
from tests.providers.vertex_harness import vertex_upstream

VENV = "/opt/switchyard"
PROVIDERS = ("anthropic", "bedrock", "vertex", "foundry")
SDKS = {"bedrock": {"boto3", "botocore"}, "vertex": {"google-auth"}, "foundry": {"azure-identity"}}
# every distribution that is a provider's SDK proper (their shared helpers, requests, urllib3 and
# cryptography, are not an SDK of anyone)
SDK_DISTRIBUTIONS = {
    "bedrock": ("boto3", "botocore", "s3transfer"),
    "vertex": ("google-auth",),
    "foundry": ("azure-identity", "azure-core", "msal", "msal-extensions"),
}
CLIENT_KEY = "sk-client-images"
UPSTREAM_KEY = "sk-upstream-images"
MODEL = "claude-sonnet-4-5"


def _install_script() -> str:
    (script,) = [args for name, args in _stages()[0] if name == "RUN" and "pip install" in args]
    return script


def _build_arg_default(stage: list[tuple[str, str]]) -> str:
    (value,) = [
        args.split("=", 1)[1] for name, args in stage if name == "ARG" and args.startswith("PROVIDERS=")
    ]
    return value


def _run_install(tmp_path: Path, providers: str) -> tuple[int, str, list[str]]:
    """Run the builder's install RUN with ``PROVIDERS``; returns (exit status, stderr, pip argv)."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True, exist_ok=True)
    (venv / "lib").mkdir(exist_ok=True)
    record = tmp_path / "pip-args"
    record.unlink(missing_ok=True)
    pip = venv / "bin" / "pip"
    pip.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {record}\n')
    pip.chmod(0o755)
    (venv / "bin" / "python").unlink(missing_ok=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    script = _install_script()
    assert VENV in script
    result = subprocess.run(
        ["/bin/sh", "-c", script.replace(VENV, str(venv))],
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PROVIDERS": providers},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    args = record.read_text().splitlines() if record.exists() else []
    return result.returncode, result.stderr, args


def _extras(pip_args: list[str]) -> list[str]:
    (requirement,) = [arg for arg in pip_args if arg.startswith(".[")]
    return requirement.removeprefix(".[").removesuffix("]").split(",")


def test_the_build_arg_defaults_to_every_provider_and_is_labelled() -> None:
    builder, final = _stages()
    assert _build_arg_default(builder) == _build_arg_default(final) == "all"
    labels = [args for name, args in final if name == "LABEL"]
    assert labels == ['io.switchyard.providers="${PROVIDERS}"']
    prelude = _instructions((ROOT / "Dockerfile").read_text())
    assert ("ARG", "PROVIDERS=all") not in prelude[:1]  # declared per stage, where it is used


@pytest.mark.parametrize(
    ("providers", "extras"),
    [
        ("all", ["all", "redis", "fleet"]),
        ("bedrock", ["bedrock", "redis", "fleet"]),
        ("vertex,foundry", ["vertex", "foundry", "redis", "fleet"]),
        ("anthropic", ["anthropic", "redis", "fleet"]),
    ],
)
def test_the_install_step_installs_the_named_extras(
    tmp_path: Path, providers: str, extras: list[str]
) -> None:
    status, stderr, args = _run_install(tmp_path, providers)
    assert status == 0, stderr
    assert _extras(args) == extras
    assert "--constraint" in args and "--only-binary=:all:" in args
    installed = distributions(extras)
    chosen = set(providers.split(",")) if providers != "all" else set(SDKS)
    for provider, sdks in SDKS.items():
        if provider in chosen:
            assert sdks <= installed, (provider, sdks - installed)
        else:
            assert not sdks & installed, (provider, sdks & installed)
    assert "redis" in installed  # the session store, whatever the provider
    assert {"authlib", "joserfc"} <= installed  # fleet sign-in, whatever the provider


@pytest.mark.parametrize(
    ("providers", "message"),
    [
        ("bedrok", "PROVIDERS: unknown provider 'bedrok'"),
        ("bedrock,gcp", "PROVIDERS: unknown provider 'gcp'"),
        ("Bedrock", "PROVIDERS: unknown provider 'Bedrock'"),
        ("", "PROVIDERS: empty"),
        (",", "PROVIDERS: empty"),
    ],
)
def test_the_install_step_refuses_a_bad_value_before_pip(
    tmp_path: Path, providers: str, message: str
) -> None:
    status, stderr, args = _run_install(tmp_path, providers)
    assert status == 1 and message in stderr and "anthropic, bedrock, vertex, foundry, or all" in stderr
    assert args == []  # pip never ran: no image without the SDK it was meant to have


def sdk_modules(provider: str) -> set[str]:
    return {m for name in SDK_DISTRIBUTIONS[provider] for m in distribution_modules(name)}


def test_each_image_lacks_the_other_providers_sdks() -> None:
    assert sdk_modules("bedrock") >= {"boto3", "botocore"} and "google.auth" in sdk_modules("vertex")
    for provider in PROVIDERS:
        absent = absent_modules([provider])
        for other in SDK_DISTRIBUTIONS:
            assert (sdk_modules(other) <= absent) == (other != provider), (provider, other)


# -- a real process with only its image's modules ------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@contextlib.asynccontextmanager
async def _upstream(
    provider: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[dict[str, str]]:
    if provider == "anthropic":
        async with run_emulator(EmulatorConfig(api_keys=frozenset({UPSTREAM_KEY}))) as emulator:
            yield {"ANTHROPIC_API_KEY": UPSTREAM_KEY, "ANTHROPIC_BASE_URL": emulator.base_url}
    elif provider == "bedrock":
        async with bedrock_upstream(tmp_path) as (env, _):
            yield env
    elif provider == "vertex":
        async with vertex_upstream(tmp_path, monkeypatch) as (env, _):
            yield env
    else:
        async with foundry_upstream(tmp_path) as (env, _):
            yield env


async def _serve(image: str, env: dict[str, str], report: Path) -> asyncio.subprocess.Process:
    source = as_if_installed(
        [image], str(report), "from gateway.cli import main\nraise SystemExit(main(['serve']))\n"
    )
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        source,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(ROOT), **env},
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )


async def _healthy(url: str, process: asyncio.subprocess.Process) -> None:
    async with aiohttp.ClientSession() as http:
        for _ in range(400):
            assert process.returncode is None, "the gateway exited"
            with contextlib.suppress(aiohttp.ClientError):
                async with http.get(url + "/healthz") as response:
                    if response.status == 200:
                        return
            await asyncio.sleep(0.05)
    raise AssertionError("gateway not healthy after 20 s")


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_provider_image_serves_its_provider_without_the_others(
    provider: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    report = tmp_path / "imports"
    port = _free_port()
    async with _upstream(provider, tmp_path, monkeypatch) as upstream:
        env = {
            **upstream,
            "GATEWAY_PORT": str(port),
            "GATEWAY_API_KEYS": CLIENT_KEY,
            "GATEWAY_PROVIDER": provider,
        }
        process = await _serve(provider, env, report)
        try:
            url = f"http://127.0.0.1:{port}"
            await _healthy(url, process)
            client = anthropic.AsyncAnthropic(api_key=CLIENT_KEY, base_url=url, max_retries=0)
            message = await client.messages.create(
                model=MODEL, max_tokens=16, messages=[{"role": "user", "content": "hi"}]
            )
            await client.close()
            assert message.content
        finally:
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
            _, stderr = await asyncio.wait_for(process.communicate(), 20)
    assert process.returncode == 0, stderr.decode()
    seen = ast.literal_eval(report.read_text())
    assert seen["loaded"] == []  # nothing the image lacks was loaded
    # and no other provider's SDK was even tried (an SDK's own optional imports, like botocore's
    # `import certifi` with its bundled fallback, behave the same in the image: they are allowed)
    others = {m for other in SDK_DISTRIBUTIONS if other != provider for m in sdk_modules(other)}
    tried = {a for a in seen["attempts"] if any(a == m or a.startswith(m + ".") for m in others)}
    assert not tried, f"the {provider} image tried other providers' SDKs: {sorted(tried)}"


@pytest.mark.parametrize(("image", "provider"), [("bedrock", "vertex"), ("anthropic", "bedrock")])
async def test_an_image_started_for_another_provider_says_which_build_arg(
    image: str, provider: str, tmp_path: Path
) -> None:
    env = {
        "GATEWAY_API_KEYS": CLIENT_KEY,
        "GATEWAY_PROVIDER": provider,
        "GATEWAY_PORT": str(_free_port()),
        "AWS_REGION": "us-east-1",
        "CLOUD_ML_REGION": "us-east5",
        "ANTHROPIC_VERTEX_PROJECT_ID": "p",
    }
    process = await _serve(image, env, tmp_path / "imports")
    _, stderr = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 2
    lines = stderr.decode().strip().splitlines()
    assert lines[-1].startswith(f"switchyard: configuration error: GATEWAY_PROVIDER: {provider} needs the ")
    assert f"--build-arg PROVIDERS={provider}" in lines[-1]
    assert "Traceback" not in stderr.decode()
