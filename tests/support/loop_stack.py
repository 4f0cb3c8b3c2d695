"""The loop tests' stack: the first-party emulator and a gateway in front of it, and the keys and
retry budget both are configured with (the fixtures that start it are in ``tests/loop/conftest.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from emulators import RunningEmulator

GATEWAY_KEY = "sk-gw-loop-tests"
UPSTREAM_KEY = "sk-upstream-loop-tests"
MAX_RETRIES = 2
"""Both the gateway server and the in-process provider caller retry twice, 1 ms apart."""


@dataclass(frozen=True)
class LoopStack:
    emulator: RunningEmulator
    gateway_url: str

    def message_bodies(self) -> list[dict[str, Any]]:
        """The Messages request bodies the emulator received, in order."""
        return [orjson.loads(r.body) for r in self.emulator.requests if r.path.startswith("/v1/messages")]

    def upstream_environ(self) -> dict[str, str]:
        """The environment that points the in-process provider at the emulator."""
        return {
            "ANTHROPIC_API_KEY": UPSTREAM_KEY,
            "ANTHROPIC_BASE_URL": self.emulator.base_url,
            "GATEWAY_MAX_RETRIES": str(MAX_RETRIES),
        }
