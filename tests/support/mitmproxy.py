"""The real mitmproxy (PyPI ``mitmproxy``) as the TLS-intercepting corporate proxy.

    async with run_mitmdump(tmp_path / "mitm", upstream_ca=pki.ca_cert) as mitm:
        env["HTTPS_PROXY"] = mitm.url                 # http://127.0.0.1:<port>
        env["GATEWAY_CA_BUNDLE"] = str(mitm.ca_cert)  # the CA mitmproxy re-signs every tunnel with
        ...
        mitm.flows()                                  # ["POST https://127.0.0.1:4711/ << 200", ...]

mitmproxy pins its own dependencies (cryptography, pyOpenSSL, ...), so it is never installed into
the project's virtualenv: it gets its own, once, in a cache directory
(``SWITCHYARD_MITMPROXY_CACHE``, default ``~/.cache/switchyard/mitmproxy/<version>``);
``.ci/run`` pre-installs it (``python -m tests.support.mitmproxy``). A test that cannot get it
(no registry) is skipped with the reason.

``mitmdump`` listens on a free loopback port (``--listen-port 0``; the port is read from its
"proxy listening at" line), keeps its CA in a fresh ``confdir`` (``mitmproxy-ca-cert.pem``), and
verifies the real target's certificate against ``upstream_ca``
(``ssl_verify_upstream_trusted_ca``). Its output (one line per flow, ``flow_detail=1``) is kept in
``mitmdump.log`` in that directory. Only its own process is stopped when the block ends.
(Debian's squid 5.7 is built with GnuTLS, without ``--with-openssl``, so it cannot ssl-bump.)
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import re
import subprocess
import sys
import venv
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = "mitmproxy"
# The newest release installable on the project's Python (3.11); mitmproxy 12 needs Python 3.12.
PINNED = "11.0.2"
INSTALL_TIMEOUT_S = 600.0
START_TIMEOUT_S = 30.0
_LISTENING = re.compile(r"proxy listening at (?:127\.0\.0\.1|\*):(\d+)")
_FLOW = re.compile(r"^\S+: (?P<method>[A-Z]+) (?P<url>\S+)\s*$")
_RESPONSE = re.compile(r"^\s*<< (?P<status>\d{3})\b")


def cache_root() -> Path:
    configured = os.environ.get("SWITCHYARD_MITMPROXY_CACHE")
    if configured:
        return Path(configured)
    return Path.home() / ".cache" / "switchyard" / "mitmproxy"


def _binary(version: str) -> Path:
    return cache_root() / version / "bin" / "mitmdump"


def install(version: str = PINNED) -> Path:
    """Install mitmproxy ``version`` into its own virtualenv in the cache (if missing); ``mitmdump``."""
    binary = _binary(version)
    if binary.exists():
        return binary
    prefix = cache_root() / version
    venv.EnvBuilder(with_pip=True, clear=True).create(prefix)
    subprocess.run(
        [str(prefix / "bin" / "python"), "-m", "pip", "install", "--quiet", f"{PACKAGE}=={version}"],
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT_S,
        check=True,
    )
    if not binary.exists():
        raise RuntimeError(f"pip installed {PACKAGE}=={version} but {binary} is missing")
    return binary


@functools.cache
def _installed_or_reason(version: str) -> Path | str:
    """One install attempt per test session: the binary, or why it could not be had."""
    try:
        return install(version)
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        detail = getattr(exc, "stderr", None) or exc
        return f"mitmproxy {version} unavailable: {str(detail).strip()[-300:]}"


def mitmdump(version: str = PINNED) -> Path:
    """The ``mitmdump`` binary, installing it when needed; skips the test if impossible."""
    found = _installed_or_reason(version)
    if isinstance(found, str):
        pytest.skip(found)
    return found


@dataclass
class Mitmdump:
    port: int
    directory: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ca_cert(self) -> Path:
        """mitmproxy's own CA: the issuer of every certificate it shows a client."""
        return self.directory / "mitmproxy-ca-cert.pem"

    @property
    def log(self) -> Path:
        return self.directory / "mitmdump.log"

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def flows(self) -> list[str]:
        """``"METHOD URL << STATUS"`` for every request mitmdump decrypted and forwarded (it
        shortens long URLs with an ellipsis)."""
        out: list[str] = []
        lines = self.output().splitlines()
        for index, line in enumerate(lines):
            flow = _FLOW.match(line)
            if flow is None:
                continue
            following = lines[index + 1] if index + 1 < len(lines) else ""
            response = _RESPONSE.match(following)
            status = response["status"] if response else "(no response)"
            out.append(f"{flow['method']} {flow['url']} << {status}")
        return out

    async def wait_for_flows(self, count: int, within_s: float = 5.0) -> list[str]:
        """``flows()`` once ``count`` of them have a response logged, or whatever is there after ``within_s``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within_s
        while True:
            flows = self.flows()
            if sum("(no response)" not in f for f in flows) >= count or loop.time() >= deadline:
                return flows
            await asyncio.sleep(0.05)


async def _stop(process: asyncio.subprocess.Process) -> None:
    if process.returncode is not None:
        return
    process.terminate()
    try:
        await asyncio.wait_for(process.wait(), 10)
    except TimeoutError:
        process.kill()
        await process.wait()


def _prepare(directory: Path) -> tuple[Path, Mitmdump]:
    """The binary (installed or skipped) and the proxy's fresh directory (port not yet known)."""
    binary = mitmdump()
    directory.mkdir(parents=True, exist_ok=True)
    return binary, Mitmdump(0, directory)


@contextlib.asynccontextmanager
async def run_mitmdump(directory: Path, upstream_ca: Path) -> AsyncIterator[Mitmdump]:
    """``mitmdump`` on a free loopback port, trusting only ``upstream_ca`` for the real targets."""
    binary, proxy = _prepare(directory)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(directory), "PYTHONUNBUFFERED": "1"}
    with proxy.log.open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            str(binary), "--listen-host", "127.0.0.1", "--listen-port", "0",
            "--set", f"confdir={directory}",
            "--set", f"ssl_verify_upstream_trusted_ca={upstream_ca}",
            "--set", "flow_detail=1",
            env=env, stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + START_TIMEOUT_S
        while not (proxy.port and proxy.ca_cert.exists()):
            if process.returncode is not None or loop.time() >= deadline:
                raise RuntimeError(
                    f"mitmdump did not start (exit {process.returncode}): {proxy.output()[-1500:]}"
                )
            listening = _LISTENING.search(proxy.output())
            if listening:
                proxy.port = int(listening[1])
            await asyncio.sleep(0.05)
        yield proxy
    finally:
        await _stop(process)


def main(argv: Sequence[str]) -> int:
    """``python -m tests.support.mitmproxy [VERSION]``: pre-install for CI."""
    version = argv[0] if argv else PINNED
    try:
        print(f"mitmproxy {version}: {install(version)}")
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        detail = getattr(exc, "stderr", None) or exc
        print(f"mitmproxy {version}: install failed: {str(detail).strip()[-1500:]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
