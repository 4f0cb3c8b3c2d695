"""Real MCP servers from npm (written by the MCP project, not by us) for the loop's MCP tests.

``@modelcontextprotocol/server-filesystem`` and ``@modelcontextprotocol/server-everything``,
pinned, are installed once into ``SWITCHYARD_MCP_SERVERS_CACHE`` (default
``~/.cache/switchyard/mcp-servers/<version>``) with ``npm install``; ``.ci/run`` pre-installs them
(``python -m tests.support.mcp_servers``). A test that cannot get them (no node, no npm, no
registry) is skipped with the reason. ``everything_http`` starts server-everything in its
streamable HTTP mode (``streamableHttp``, ``PORT``; its README) on a free loopback port.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

VERSION = "2026.8.31"
PACKAGES = ("@modelcontextprotocol/server-filesystem", "@modelcontextprotocol/server-everything")
BINARIES = {"filesystem": "mcp-server-filesystem", "everything": "mcp-server-everything"}
INSTALL_TIMEOUT_S = 600.0
START_TIMEOUT_S = 30.0


def cache_root() -> Path:
    configured = os.environ.get("SWITCHYARD_MCP_SERVERS_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "switchyard" / "mcp-servers"


def _bin_dir() -> Path:
    return cache_root() / VERSION / "node_modules" / ".bin"


def install() -> Path:
    """Install the pinned servers (if missing); the directory of their binaries."""
    bin_dir = _bin_dir()
    if all((bin_dir / name).exists() for name in BINARIES.values()):
        return bin_dir
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("npm is not installed")
    prefix = cache_root() / VERSION
    prefix.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund", "--no-save",
         "--loglevel=error", *(f"{package}@{VERSION}" for package in PACKAGES)],
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT_S,
        check=True,
    )  # fmt: skip
    missing = [name for name in BINARIES.values() if not (bin_dir / name).exists()]
    if missing:
        raise RuntimeError(f"npm installed the MCP servers but {missing} are missing")
    return bin_dir


def server_binary(kind: str) -> Path:
    """The binary of ``filesystem`` or ``everything``, installing when needed; skips if impossible."""
    if shutil.which("node") is None:
        pytest.skip("MCP servers: node is not installed")
    try:
        return install() / BINARIES[kind]
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        detail = getattr(exc, "stderr", None) or exc
        pytest.skip(f"MCP servers {VERSION} unavailable: {str(detail).strip()[:300]}")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.asynccontextmanager
async def everything_http() -> AsyncIterator[str]:
    """server-everything over streamable HTTP; yields its ``/mcp`` URL, stops it afterwards."""
    binary = server_binary("everything")
    port = _free_port()
    process = await asyncio.create_subprocess_exec(
        str(binary), "streamableHttp",
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PORT": str(port), "HOME": str(cache_root())},
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert process.stderr is not None
        async with asyncio.timeout(START_TIMEOUT_S):
            while True:  # it logs "MCP Streamable HTTP Server listening on port N" once listening
                line = await process.stderr.readline()
                if not line:
                    raise RuntimeError("server-everything exited before listening")
                if b"listening on port" in line:
                    break
        drain = asyncio.create_task(_drain(process.stderr))  # a full pipe would stall the server
        try:
            yield f"http://127.0.0.1:{port}/mcp"
        finally:
            drain.cancel()
    finally:
        if process.returncode is None:
            process.terminate()
            try:
                async with asyncio.timeout(5):
                    await process.wait()
            except TimeoutError:
                process.kill()
                await process.wait()


async def _drain(stream: asyncio.StreamReader) -> None:
    while await stream.read(65536):
        continue


def main() -> int:
    """``python -m tests.support.mcp_servers``: pre-install for CI."""
    try:
        print(f"mcp servers {VERSION}: {install()}")
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        print(f"mcp servers {VERSION}: install failed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
