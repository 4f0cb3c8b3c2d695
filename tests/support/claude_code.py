"""The real Claude Code CLI (npm ``@anthropic-ai/claude-code``) as a test client.

Versions are installed once into a cache directory (``SWITCHYARD_CLAUDE_CODE_CACHE``, default
``~/.cache/switchyard/claude-code/<version>``) with ``npm install``; ``.ci/run`` pre-installs them
(``python -m tests.support.claude_code``) so the suite itself does not wait on the registry. A test
that cannot get the CLI (no npm, no registry) is skipped with the reason.

``claude_env`` builds a hermetic environment for one run: a throw-away ``HOME`` (no user settings,
no login), every non-essential call to Anthropic's own hosts disabled (so nothing leaves loopback),
and only the variables the caller passes for the mode under test.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support import binaries

PACKAGE = "@anthropic-ai/claude-code"
PINNED = "2.1.197"  # the version the captures in tests/fixtures/real-clients/ come from
NEWEST_LINE = "2.1"  # "the newest 2.1.x the registry serves"
GATEWAY_LOGIN = "2.1.332"  # the version whose /login dialogs tests/fleet_signin reads on screen
INSTALL_TIMEOUT_S = 600.0

QUIET_ENV: Mapping[str, str] = {
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_AUTOUPDATER": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "CLAUDE_CODE_DISABLE_TERMINAL_TITLE": "1",
}


def cache_root() -> Path:
    configured = os.environ.get("SWITCHYARD_CLAUDE_CODE_CACHE")
    if configured:
        return Path(configured)
    return Path.home() / ".cache" / "switchyard" / "claude-code"


def _binary(version: str) -> Path:
    return cache_root() / version / "node_modules" / ".bin" / "claude"


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) if part.isdigit() else -1 for part in version.split("."))


@functools.cache
def newest_version() -> str | None:
    """The newest ``2.1.x`` on the registry, or the newest one already installed when offline."""
    npm = shutil.which("npm")
    if npm is not None:
        try:
            out = subprocess.run(
                [npm, "view", f"{PACKAGE}@{NEWEST_LINE}", "version", "--json"],
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
            ).stdout
            found = json.loads(out)
            versions = [found] if isinstance(found, str) else list(found)
            if versions:
                return max(versions, key=_version_key)
        except (OSError, subprocess.SubprocessError, ValueError):
            pass
    root = cache_root()
    installed = [p.name for p in root.glob(f"{NEWEST_LINE}.*") if (p / "node_modules/.bin/claude").exists()]
    return max(installed, key=_version_key) if installed else None


def install(version: str) -> Path:
    """Install ``version`` into the cache (if missing); the path of its ``claude`` binary."""
    binary = _binary(version)
    if binary.exists():
        return binary
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("npm is not installed")
    prefix = cache_root() / version
    prefix.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund", "--no-save",
         "--loglevel=error", f"{PACKAGE}@{version}"],
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT_S,
        check=True,
    )  # fmt: skip
    if not binary.exists():
        raise RuntimeError(f"npm installed {PACKAGE}@{version} but {binary} is missing")
    return binary


def cli(version: str) -> Path:
    """The ``claude`` binary of ``version``, installing it when needed; skips the test if impossible."""
    binaries.require("node")
    try:
        return install(version)
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        detail = getattr(exc, "stderr", None) or exc
        pytest.skip(f"Claude Code CLI {version} unavailable: {str(detail).strip()[:300]}")


def versions_under_test() -> list[str]:
    """The pinned capture version and the newest 2.1.x (one entry when they coincide)."""
    newest = newest_version()
    return [PINNED] if newest in (None, PINNED) else [PINNED, newest]


def claude_env(home: Path, **variables: str) -> dict[str, str]:
    """A hermetic environment for one CLI run: fresh HOME, quiet, plus ``variables``."""
    home.mkdir(parents=True, exist_ok=True)
    env = {
        "HOME": str(home),
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "NO_COLOR": "1",
        **QUIET_ENV,
    }
    env.update(variables)
    return env


@dataclass(frozen=True)
class ClaudeRun:
    returncode: int
    stdout: str
    stderr: str
    result: dict[str, Any] | None  # the --output-format json result object

    def describe(self) -> str:
        return f"exit {self.returncode}; stdout={self.stdout[-1500:]!r}; stderr={self.stderr[-1500:]!r}"


async def run_claude(
    binary: Path, args: Sequence[str], env: Mapping[str, str], cwd: Path, timeout_s: float = 120.0
) -> ClaudeRun:
    """Run ``claude -p ... --output-format json`` without blocking the event loop."""
    process = await asyncio.create_subprocess_exec(
        str(binary), *args, "--output-format", "json",
        cwd=str(cwd), env=dict(env),
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout_s)
    except TimeoutError:
        process.kill()
        out, err = await process.communicate()
    stdout, stderr = out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
    result: dict[str, Any] | None = None
    for line in reversed(stdout.strip().splitlines()):
        try:
            decoded = json.loads(line)
        except ValueError:
            continue
        if isinstance(decoded, dict) and decoded.get("type") == "result":
            result = decoded
            break
    return ClaudeRun(process.returncode if process.returncode is not None else -1, stdout, stderr, result)


def main(argv: Sequence[str]) -> int:
    """``python -m tests.support.claude_code [VERSION|newest ...]``: pre-install for CI (by default
    the capture version, the gateway-login version and the newest)."""
    wanted = list(argv) or [PINNED, GATEWAY_LOGIN, "newest"]
    status = 0
    for version in wanted:
        resolved = newest_version() if version == "newest" else version
        if resolved is None:
            print(f"claude-code: could not resolve {version!r} (no registry?)", file=sys.stderr)
            status = 1
            continue
        try:
            print(f"claude-code {resolved}: {install(resolved)}")
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
            print(f"claude-code {resolved}: install failed: {exc}", file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
