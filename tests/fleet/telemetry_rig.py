"""A gateway serving the OTLP intake on loopback (its upstream is never contacted), for tests."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from gateway.app import create_app
from gateway.config import Settings
from gateway.metrics import GatewayMetrics
from gateway.process import running

ALPHA_KEY = "sk-fleet-alpha-1f2e"  # team alpha: the caller's one group is "alpha"
BETA_KEY = "sk-fleet-beta-9a8b"
GAMMA_KEY = "sk-fleet-gamma-44c1"
METRICS_KEY = "sk-fleet-metrics-0d0d"  # role=metrics: /metrics only


@dataclass
class TelemetryRig:
    base_url: str
    metrics: GatewayMetrics
    settings: Settings

    def value(self, name: str, **labels: str) -> float:
        found = self.metrics.registry.get_sample_value(name, labels)
        return 0.0 if found is None else found

    def samples(self, name: str) -> dict[tuple[tuple[str, str], ...], float]:
        """Every sample of ``name``: sorted labels -> value."""
        return {
            tuple(sorted(sample.labels.items())): sample.value
            for family in self.metrics.registry.collect()
            for sample in family.samples
            if sample.name == name
        }


def key_file(directory: Path) -> Path:
    path = directory / "keys"
    path.write_text(
        f"{ALPHA_KEY} alpha\n{BETA_KEY} beta\n{GAMMA_KEY} gamma\n{METRICS_KEY} monitoring role=metrics\n",
        encoding="utf-8",
    )
    return path


def settings_for(directory: Path, upstream: str = "http://127.0.0.1:9", **env: str) -> Settings:
    return Settings.from_environ(
        {
            "GATEWAY_API_KEYS_FILE": str(key_file(directory)),
            "ANTHROPIC_API_KEY": "sk-upstream-fleet",
            "ANTHROPIC_BASE_URL": upstream,
            **env,
        }
    )


@contextlib.asynccontextmanager
async def telemetry_rig(
    directory: Path, env: Mapping[str, str] | None = None, *, upstream: str = "http://127.0.0.1:9"
) -> AsyncIterator[TelemetryRig]:
    settings = settings_for(directory, upstream, **(env or {}))
    metrics = GatewayMetrics()
    async with running(create_app(settings, metrics=metrics), "127.0.0.1", 0) as server:
        yield TelemetryRig(server.base_url, metrics, settings)
