"""The ``fleet`` fixture: a policy gateway (``tests.support.fleet_stack``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.fleet_stack import ADMIN_KEY, TEAM_KEYS, FleetStack
from tests.support.gateway_stack import start_stack
from tests.support.threaded import LoopThread


@pytest.fixture
def fleet(tmp_path: Path, loop_thread: LoopThread) -> Iterator[Callable[..., FleetStack]]:
    def start(policy: str, **env: str) -> FleetStack:
        policy_path = tmp_path / "policy.yaml"
        policy_path.write_text(policy)
        keys = tmp_path / "keys"
        keys.write_text(
            "\n".join([f"{key} {team}" for team, key in TEAM_KEYS.items()] + [f"{ADMIN_KEY} ops role=admin"])
            + "\n"
        )
        stack = start_stack(
            loop_thread,
            GATEWAY_POLICY_FILE=str(policy_path),
            GATEWAY_API_KEYS_FILE=str(keys),
            GATEWAY_POLICY_RELOAD_S="0",
            **env,
        )
        return FleetStack(stack, policy_path, f"http://127.0.0.1:{stack.port}")

    yield start
