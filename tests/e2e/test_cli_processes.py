"""The entry points as real processes: the emulator (`python -m emulators`) and `switchyard serve`."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import anthropic
import requests


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def _wait_for(url: str, deadline_s: float = 20) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        try:
            requests.get(url, timeout=1)
            return
        except requests.ConnectionError:
            time.sleep(0.05)
    raise TimeoutError(url)


@contextmanager
def _process(
    args: list[str], env: dict[str, str], module: str = "gateway"
) -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(
        [sys.executable, "-m", module, *args],
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_emulate_and_serve_processes() -> None:
    emu_port, gw_port = _free_port(), _free_port()
    with (
        _process(["--provider", "anthropic", "--port", str(emu_port), "--api-key", "sk-up"], {}, module="emulators"),
        _process(
            ["serve"],
            {
                "GATEWAY_PORT": str(gw_port),
                "GATEWAY_API_KEYS": "sk-client",
                "ANTHROPIC_API_KEY": "sk-up",
                "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{emu_port}",
            },
        ) as gateway,
    ):
        _wait_for(f"http://127.0.0.1:{emu_port}/v1/models")
        _wait_for(f"http://127.0.0.1:{gw_port}/healthz")
        assert requests.get(f"http://127.0.0.1:{gw_port}/readyz", timeout=5).status_code == 200
        client = anthropic.Anthropic(
            api_key="sk-client", base_url=f"http://127.0.0.1:{gw_port}", max_retries=0
        )
        message = client.messages.create(
            model="claude-sonnet-4-6", max_tokens=32, messages=[{"role": "user", "content": "hi"}]
        )
        assert message.stop_reason == "end_turn"
        gateway.send_signal(signal.SIGTERM)
        assert gateway.wait(10) == 0
        log = gateway.stderr.read().decode() if gateway.stderr else ""
        assert '"event":"request"' in log  # one structured access line per request
        assert "sk-client" not in log and "sk-up" not in log
