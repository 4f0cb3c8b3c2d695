"""A real OIDC identity provider on loopback for the sign-in tests: npm ``oauth2-mock-server``
(AXA's test IdP: discovery, JWKS, authorization-code flow with PKCE and nonce, RS256-signed ID
tokens), not written here.

The pinned version is installed once into ``SWITCHYARD_OIDC_IDP_CACHE`` (default
``~/.cache/switchyard/oauth2-mock-server/<version>``) with ``npm install``
(``python -m tests.support.oidc_idp`` pre-installs it for CI); a test without node or npm is
skipped with the reason. ``running_idp`` starts it through ``oidc_idp_launcher.mjs``, which takes
the signed-in user's claims from a profile file the test rewrites (groups changed at the IdP, a
user disabled) and records what the relying party sent. With ``tls`` (a :class:`LocalPKI`) the IdP
serves HTTPS with that PKI's server certificate (oauth2-mock-server's own TLS): issuer
``https://localhost:<port>``, trusted only by what trusts the test CA.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.support.tls import LocalPKI

PACKAGE = "oauth2-mock-server"
VERSION = "9.3.0"
INSTALL_TIMEOUT_S = 300.0
START_TIMEOUT_S = 30.0
LAUNCHER = Path(__file__).with_name("oidc_idp_launcher.mjs")


def cache_root() -> Path:
    configured = os.environ.get("SWITCHYARD_OIDC_IDP_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "switchyard" / PACKAGE


def _entry() -> Path:
    return cache_root() / VERSION / "node_modules" / PACKAGE / "dist" / "index.mjs"


def install() -> Path:
    """Install the pinned IdP (if missing); its module entry point."""
    entry = _entry()
    if entry.exists():
        return entry
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("npm is not installed")
    prefix = cache_root() / VERSION
    prefix.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund", "--no-save",
         "--loglevel=error", f"{PACKAGE}@{VERSION}"],
        capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, check=True,
    )  # fmt: skip
    if not entry.exists():
        raise RuntimeError(f"npm installed {PACKAGE} but {entry} is missing")
    return entry


def idp_entry() -> Path:
    """The IdP's entry module, installing it when needed; skips the test when impossible."""
    if shutil.which("node") is None:
        pytest.skip("OIDC IdP (oauth2-mock-server): node is not installed")
    try:
        return install()
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        detail = getattr(exc, "stderr", None) or exc
        pytest.skip(f"{PACKAGE} {VERSION} unavailable: {str(detail).strip()[:300]}")


@dataclass
class RunningIdp:
    issuer: str
    profile_path: Path
    events_path: Path
    profile: dict[str, Any] = field(default_factory=dict)

    def set_user(self, **changes: Any) -> None:
        """Change the signed-in user at the IdP (``groups=[...]``, ``disabled=True``)."""
        self.profile.update(changes)
        self.profile_path.write_text(json.dumps(self.profile))

    def events(self) -> list[dict[str, Any]]:
        if not self.events_path.exists():
            return []
        return [json.loads(line) for line in self.events_path.read_text().splitlines() if line.strip()]


@contextlib.asynccontextmanager
async def running_idp(directory: Path, tls: LocalPKI | None = None, **user: Any) -> AsyncIterator[RunningIdp]:
    entry = idp_entry()
    idp = RunningIdp("", directory / "idp-profile.json", directory / "idp-events.jsonl")
    idp.set_user(**user)
    pem = [str(tls.server_key), str(tls.server_cert)] if tls is not None else []
    process = await asyncio.create_subprocess_exec(
        "node", str(LAUNCHER), str(entry), str(idp.profile_path), str(idp.events_path), *pem,
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), START_TIMEOUT_S)
        if not line:
            stderr = await process.stderr.read() if process.stderr else b""
            raise RuntimeError(f"the IdP did not start: {stderr.decode(errors='replace')[-500:]}")
        idp.issuer = json.loads(line)["issuer"]
        yield idp
    finally:
        if process.returncode is None:
            process.terminate()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(process.wait(), 10)
            if process.returncode is None:
                process.kill()
                await process.wait()


def main(argv: Sequence[str]) -> int:
    """``python -m tests.support.oidc_idp``: pre-install the IdP for CI."""
    try:
        print(f"{PACKAGE} {VERSION}: {install()}")
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        print(f"{PACKAGE} {VERSION}: install failed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
