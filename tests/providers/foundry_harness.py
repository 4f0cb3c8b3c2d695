"""A Microsoft Foundry upstream for tests: the emulator with fixture credentials.

``foundry_upstream(tmp_path)`` starts the Foundry emulator (API key ``FOUNDRY_KEY``, static Entra
token ``ENTRA_TOKEN``, Entra app ``ENTRA_CLIENT_ID`` / ``ENTRA_CLIENT_SECRET``) and yields
``(env, emulator)`` with the environment a gateway needs (``GATEWAY_PROVIDER=foundry``,
``ANTHROPIC_FOUNDRY_BASE_URL`` ending in ``/anthropic``, ``ANTHROPIC_FOUNDRY_API_KEY``). With
``tls=True`` the emulator serves HTTPS from a throwaway PKI (MSAL only talks to an ``https``
authority) and ``env`` carries ``GATEWAY_CA_BUNDLE``; ``ca_bundle(env)`` gives its path.

``foundry_gateway(env)`` runs the gateway in-process (``FoundryProvider`` passed explicitly,
optionally with an Entra ``token_source``) and yields its base URL.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

import anthropic

from emulators import EmulatorConfig, RunningEmulator, run_emulator
from gateway.app import create_app
from gateway.config import Settings
from gateway.metrics import GatewayMetrics
from gateway.process import running
from gateway.providers.foundry import FoundryProvider
from gateway.providers.token_cache import TokenFetch
from tests.support.tls import make_pki

FOUNDRY_KEY = "foundry-key"
ENTRA_TOKEN = "entra-token"
ENTRA_TENANT = "00000000-0000-4000-8000-0000000000aa"
ENTRA_CLIENT_ID = "11111111-1111-4111-8111-111111111111"
ENTRA_CLIENT_SECRET = "entra-client-secret"
GATEWAY_KEY = "sk-gw-foundry-test"


@contextlib.asynccontextmanager
async def foundry_upstream(
    tmp_path: Path, *, tls: bool = False, **config: Any
) -> AsyncIterator[tuple[dict[str, str], RunningEmulator]]:
    """The Foundry emulator with fixture credentials; yields ``(env, emulator)``."""
    options: dict[str, Any] = {
        "foundry_api_keys": frozenset({FOUNDRY_KEY}),
        "foundry_entra_tokens": frozenset({ENTRA_TOKEN}),
        "foundry_entra_clients": {ENTRA_CLIENT_ID: ENTRA_CLIENT_SECRET},
    }
    options.update(config)
    pki = make_pki(tmp_path) if tls else None
    ssl_context = pki.server_context(require_client_cert=False) if pki is not None else None
    async with run_emulator(
        EmulatorConfig(**options), provider="foundry", ssl_context=ssl_context
    ) as emulator:
        env = {
            "GATEWAY_PROVIDER": "foundry",
            "ANTHROPIC_FOUNDRY_BASE_URL": emulator.base_url + "/anthropic",
            "ANTHROPIC_FOUNDRY_API_KEY": FOUNDRY_KEY,
        }
        if pki is not None:
            env["GATEWAY_CA_BUNDLE"] = str(pki.ca_cert)
        yield env, emulator


def ca_bundle(env: Mapping[str, str]) -> str:
    return env["GATEWAY_CA_BUNDLE"]


def gateway_settings(env: Mapping[str, str], **extra: str) -> Settings:
    """Gateway settings for ``env`` with one inbound key and no gateway-side retries."""
    return Settings.from_environ(
        {"GATEWAY_API_KEYS": GATEWAY_KEY, "GATEWAY_MAX_RETRIES": "0", **env, **extra}
    )


@contextlib.asynccontextmanager
async def foundry_gateway(
    env: Mapping[str, str],
    *,
    token_source: TokenFetch | None = None,
    clock: Callable[[], float] | None = None,
    **extra: str,
) -> AsyncIterator[str]:
    """The gateway in-process in front of ``env``'s Foundry upstream; yields its base URL."""
    settings = gateway_settings(env, **extra)
    options: dict[str, Any] = {"token_source": token_source}
    if clock is not None:
        options["clock"] = clock
    app = create_app(settings, FoundryProvider(settings, **options), metrics=GatewayMetrics())
    async with running(app, "127.0.0.1", 0) as server:
        yield server.base_url


def error_of(exc: anthropic.APIStatusError) -> dict[str, Any]:
    """``error`` of an SDK status error's decoded body (bare or, from google, in a JSON array)."""
    body = exc.body[0] if isinstance(exc.body, list) else exc.body
    assert isinstance(body, dict) and isinstance(body.get("error"), dict)
    error: dict[str, Any] = body["error"]
    return error


def follow_up(prompt: Any, reply: anthropic.types.Message, tool_use_id: str, result: str) -> Any:
    """The next turn's messages: the prompt, the assistant's reply, and a tool result for it."""
    return [
        *prompt,
        {"role": "assistant", "content": [block.model_dump() for block in reply.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_use_id, "content": result}]},
    ]
