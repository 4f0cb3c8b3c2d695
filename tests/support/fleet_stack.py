"""The policy tests' stack: a gateway with a policy file and a keys file in front of the
first-party emulator (the ``fleet`` fixture in tests/fleet/conftest.py starts it)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import requests

from gateway.providers.base import ClientRequest, Operation
from tests.support.gateway_stack import CLIENT_KEY, GatewayStack

ADMIN_KEY = "sk-fleet-admin-77c1"
TEAM_KEYS = {"alpha": "sk-fleet-alpha-01", "beta": "sk-fleet-beta-02", "gamma": "sk-fleet-gamma-03"}
MESSAGE: dict[str, Any] = {
    "model": "claude-sonnet-4-5",
    "max_tokens": 32,
    "messages": [{"role": "user", "content": "hi"}],
}


@dataclass
class FleetStack:
    stack: GatewayStack
    policy_path: Path
    url: str

    def client(self, key: str = CLIENT_KEY) -> anthropic.Anthropic:
        return anthropic.Anthropic(api_key=key, base_url=self.url, max_retries=0)

    def post(
        self, key: str, body: dict[str, Any] | None = None, path: str = "/v1/messages"
    ) -> requests.Response:
        return requests.post(self.url + path, json=body or MESSAGE, headers={"x-api-key": key}, timeout=10)

    def get(self, path: str, key: str = CLIENT_KEY, **headers: str) -> requests.Response:
        return requests.get(self.url + path, headers={"x-api-key": key, **headers}, timeout=10)

    def write_policy(self, text: str) -> None:
        staging = self.policy_path.with_name("policy.new")
        staging.write_text(text)
        os.replace(staging, self.policy_path)


def messages_request(model: str = "claude-sonnet-4-5", stream: bool = False) -> ClientRequest:
    """A minimal parsed Messages request for a policy gate's ``admit`` (a fresh request id each)."""
    payload = {
        "model": model,
        "max_tokens": 8,
        "messages": [{"role": "user", "content": "hi"}],
        "stream": stream,
    }
    return ClientRequest(Operation.MESSAGES, None, payload, [], f"req-{time.monotonic_ns()}")
