"""Start-up mistakes, each run through the real CLI (`python -m gateway serve`) in a controlled
environment: every problem is exactly one line on stderr naming the variable, the exit status is 2,
there is no traceback and no secret is printed."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.tls import make_pki

PREFIX = "switchyard: configuration error: "
SECRETS = ("sk-client-secret", "sk-upstream-secret", "pr0xy-s3cret", "r3dis-s3cret")


@dataclass(frozen=True)
class Case:
    env: Callable[[Path, int], dict[str, str]]
    """The mistake's variables, given a scratch directory and a port to use."""
    expected: Callable[[Path, int], list[str]]
    """A regular expression per line expected after the prefix, in order."""


def _not_pem(directory: Path) -> str:
    path = directory / "not-pem.crt"
    path.write_bytes(b"\x30\x82\x01\x0a not a PEM file at all")
    return str(path)


def _client_pair(directory: Path, key: str) -> dict[str, str]:
    """A real client certificate with ``key``: ``"not-pem"`` or ``"other"`` (the server's key)."""
    (directory / "pki").mkdir()
    pki = make_pki(directory / "pki")
    key_path = _not_pem(directory) if key == "not-pem" else str(pki.server_key)
    return {"GATEWAY_CLIENT_CERT": str(pki.client_cert), "GATEWAY_CLIENT_KEY": key_path}


CASES: dict[str, Case] = {
    "misspelled variable": Case(
        lambda d, p: {"GATEWAY_PROVIDR": "bedrock"},
        lambda d, p: [re.escape("GATEWAY_PROVIDR: unknown variable (did you mean GATEWAY_PROVIDER?)")],
    ),
    "two bad values at once": Case(
        lambda d, p: {"GATEWAY_PORT": "eighty", "GATEWAY_LOG_LEVEL": "LOUD"},
        lambda d, p: [
            r"GATEWAY_PORT: Input should be a valid integer.*",
            re.escape("GATEWAY_LOG_LEVEL: unknown log level 'LOUD'"),
        ],
    ),
    "a bad value and a cross-field problem": Case(
        lambda d, p: {"GATEWAY_MAX_RETRIES": "-1", "GATEWAY_PROVIDER": "bedrock", "GATEWAY_MAXRETRIES": "3"},
        lambda d, p: [
            r"GATEWAY_MAX_RETRIES: Input should be greater than or equal to 0",
            re.escape("AWS_REGION: required when the provider is bedrock (or set AWS_DEFAULT_REGION)"),
            re.escape("GATEWAY_MAXRETRIES: unknown variable (did you mean GATEWAY_MAX_RETRIES?)"),
        ],
    ),
    "no inbound key and a bad value": Case(
        lambda d, p: {"GATEWAY_API_KEYS": "", "GATEWAY_FIRST_BYTE_TIMEOUT_S": "0"},
        lambda d, p: [
            r"GATEWAY_FIRST_BYTE_TIMEOUT_S: Input should be greater than 0",
            r"GATEWAY_API_KEYS / GATEWAY_API_KEYS_FILE: no inbound API key configured; .*",
        ],
    ),
    "port value out of range": Case(
        lambda d, p: {"GATEWAY_PORT": "70000"},
        lambda d, p: [r"GATEWAY_PORT: Input should be less than or equal to 65535"],
    ),
    "port in use": Case(
        lambda d, p: {"GATEWAY_PORT": str(p)},
        lambda d, p: [
            re.escape(f"GATEWAY_PORT: 127.0.0.1:{p} is already in use (another process listens there)")
        ],
    ),
    "unresolvable host": Case(
        lambda d, p: {"GATEWAY_HOST": "no-such-host.invalid"},
        lambda d, p: [r"GATEWAY_HOST: cannot resolve 'no-such-host\.invalid' \(.+\)"],
    ),
    "host not on this machine": Case(
        lambda d, p: {"GATEWAY_HOST": "192.0.2.1"},  # TEST-NET-1: never a local address
        lambda d, p: [
            re.escape("GATEWAY_HOST: 192.0.2.1 is not an address of this machine (cannot listen there)")
        ],
    ),
    "CA bundle not PEM": Case(
        lambda d, p: {"GATEWAY_CA_BUNDLE": _not_pem(d)},
        lambda d, p: [
            re.escape(f"GATEWAY_CA_BUNDLE: not a PEM CA bundle (no readable certificate in {d}/not-pem.crt)")
        ],
    ),
    "SSL_CERT_FILE not PEM": Case(
        lambda d, p: {"SSL_CERT_FILE": _not_pem(d)},
        lambda d, p: [
            re.escape(f"SSL_CERT_FILE: not a PEM CA bundle (no readable certificate in {d}/not-pem.crt)")
        ],
    ),
    "client certificate not PEM": Case(
        lambda d, p: {"GATEWAY_CLIENT_CERT": _not_pem(d)},
        lambda d, p: [
            re.escape(
                f"GATEWAY_CLIENT_CERT: not a PEM certificate (no readable certificate in {d}/not-pem.crt)"
            )
        ],
    ),
    "client key not PEM": Case(
        lambda d, p: _client_pair(d, "not-pem"),
        lambda d, p: [re.escape(f"GATEWAY_CLIENT_KEY: not a PEM private key: {d}/not-pem.crt")],
    ),
    "client key does not match the certificate": Case(
        lambda d, p: _client_pair(d, "other"),
        lambda d, p: [
            re.escape(
                f"GATEWAY_CLIENT_KEY: the key {d}/pki/server.key does not match the certificate in GATEWAY_CLIENT_CERT"
            )
        ],
    ),
    "missing region for bedrock": Case(
        lambda d, p: {"GATEWAY_PROVIDER": "bedrock"},
        lambda d, p: [
            re.escape("AWS_REGION: required when the provider is bedrock (or set AWS_DEFAULT_REGION)")
        ],
    ),
    "proxy URL with a password and a bad port": Case(
        lambda d, p: {"HTTPS_PROXY": "http://alice:pr0xy-s3cret@proxy.corp:31280x"},
        lambda d, p: [re.escape("HTTPS_PROXY: invalid port in URL 'http://***@proxy.corp:31280x'")],
    ),
    "proxy URL with a password and a bad scheme": Case(
        lambda d, p: {"https_proxy": "socks5://alice:pr0xy-s3cret@proxy.corp:1080"},
        lambda d, p: [re.escape("https_proxy: not an http(s) URL: 'socks5://***@proxy.corp:1080'")],
    ),
    "session store URL with a password": Case(
        lambda d, p: {"GATEWAY_SESSION_STORE": "memcache://:r3dis-s3cret@cache:11211"},
        lambda d, p: [
            re.escape(
                "GATEWAY_SESSION_STORE: expected 'memory' or a redis:// URL, got 'memcache://***@cache:11211'"
            )
        ],
    ),
}


@dataclass(frozen=True)
class Outcome:
    returncode: int
    stdout: str
    stderr: str
    expected: list[str]


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Outcome]]:
    """Every case's process, all started at once (a busy port held open meanwhile)."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        running = {}
        for name, case in CASES.items():
            directory = tmp_path_factory.mktemp("case")
            env = {
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "GATEWAY_API_KEYS": "sk-client-secret",
                "ANTHROPIC_API_KEY": "sk-upstream-secret",
                "GATEWAY_PORT": "0",
                **case.env(directory, port),
            }
            if "PYTHONPATH" in os.environ:
                env["PYTHONPATH"] = os.environ["PYTHONPATH"]
            process = subprocess.Popen(
                [sys.executable, "-m", "gateway", "serve"],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            running[name] = (process, case.expected(directory, port))
        results = {}
        for name, (process, expected) in running.items():
            try:
                stdout, stderr = process.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                process.kill()
                stdout, stderr = process.communicate()
            results[name] = Outcome(process.returncode, stdout, stderr, expected)
        yield results


@pytest.mark.parametrize("name", list(CASES))
def test_startup_mistake_is_one_line_per_problem(name: str, outcomes: dict[str, Outcome]) -> None:
    result = outcomes[name]
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == len(result.expected), lines
    for line, pattern in zip(lines, result.expected, strict=True):
        assert re.fullmatch(re.escape(PREFIX) + pattern, line), line
    for secret in SECRETS:
        assert secret not in result.stderr + result.stdout
