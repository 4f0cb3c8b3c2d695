"""Without the ``fleet`` extra (no ``opentelemetry-proto``) the gateway still starts: the OTLP paths
are not served (404), start-up says why, and the fleet counters the sign-in flow and the policy use
are registered all the same. Run in a subprocess whose import system cannot see ``opentelemetry``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import asyncio, logging, sys

class Hidden:
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Hidden())
logging.basicConfig(level=logging.WARNING, stream=sys.stdout, format="%(message)s")

import aiohttp
from gateway.config import Settings
from gateway.metrics import GatewayMetrics
from gateway.app import create_app
from gateway.process import running

async def main():
    settings = Settings.from_environ({"GATEWAY_API_KEYS": "k", "ANTHROPIC_API_KEY": "u",
                                      "ANTHROPIC_BASE_URL": "http://127.0.0.1:9"})
    metrics = GatewayMetrics()
    async with running(create_app(settings, metrics=metrics), "127.0.0.1", 0) as server:
        async with aiohttp.ClientSession() as session:
            async with session.post(server.base_url + "/v1/metrics", data=b"x",
                                    headers={"authorization": "Bearer k"}) as response:
                print("status", response.status)
    print("signins", metrics.registry.get_sample_value("gateway_fleet_signins_total", {"outcome": "success"}))
    print("loaded", sorted(m for m in sys.modules if m.startswith(("opentelemetry", "google.protobuf"))))

asyncio.run(main())
"""


def test_the_gateway_serves_without_opentelemetry() -> None:
    result = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60, cwd=ROOT, check=False
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "status 404" in lines
    assert "signins 0.0" in lines
    assert "loaded []" in lines
    assert any("OTLP intake off: opentelemetry-proto is not installed" in line for line in lines)
