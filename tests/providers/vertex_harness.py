"""A Vertex AI upstream for tests: the emulator plus a real service account google-auth can use.

``vertex_upstream(tmp_path, monkeypatch)`` starts the Vertex emulator, writes a service-account
JSON whose key was generated here and whose ``token_uri`` is the emulator's ``/token``, registers
the public key with the emulator, and yields ``(env, emulator)``: the environment a gateway needs
(``GATEWAY_PROVIDER=vertex``, ``CLOUD_ML_REGION``, ``ANTHROPIC_VERTEX_PROJECT_ID``,
``ANTHROPIC_VERTEX_BASE_URL``, ``GOOGLE_APPLICATION_CREDENTIALS``) and the running emulator.
``GOOGLE_APPLICATION_CREDENTIALS`` is also set in ``os.environ`` (google-auth's ``default()``
reads it there). The gateway's first request makes google-auth sign a JWT and exchange it at the
emulator for an access token, for real.

``vertex_gateway(env)`` runs the gateway in-process (``VertexProvider`` passed explicitly) and
yields its base URL.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import functools
import json
import urllib.parse
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

import anthropic
import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from emulators import EmulatorConfig, RunningEmulator, run_emulator
from emulators.clock import Clock
from gateway.app import create_app
from gateway.config import Settings
from gateway.metrics import GatewayMetrics
from gateway.process import running
from gateway.providers.vertex import VertexProvider

PROJECT = "switchyard-test"
REGION = "us-east5"
SERVICE_ACCOUNT = f"gateway@{PROJECT}.iam.gserviceaccount.com"
GATEWAY_KEY = "sk-gw-vertex-test"


@functools.cache
def service_account_key() -> rsa.RSAPrivateKey:
    """One RSA key per test session (generating one costs ~50 ms)."""
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@functools.cache
def other_key() -> rsa.RSAPrivateKey:
    """A key the emulator does not know (a revoked or foreign service-account key)."""
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def public_pem(key: rsa.RSAPrivateKey) -> str:
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


def write_service_account(
    directory: Path,
    token_uri: str,
    *,
    key: rsa.RSAPrivateKey | None = None,
    email: str = SERVICE_ACCOUNT,
    project_id: str | None = PROJECT,
    path: Path | None = None,
) -> Path:
    """A service-account key file as the Cloud console downloads it (at ``path``: a key rotated
    in place, as a re-mounted secret; else a new file in ``directory``)."""
    private = (key or service_account_key()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    info: dict[str, Any] = {
        "type": "service_account",
        "private_key_id": "0123456789abcdef",
        "private_key": private.decode(),
        "client_email": email,
        "client_id": "100000000000000000001",
        "auth_uri": "https://accounts.google.com/o/oauth2/auth",
        "token_uri": token_uri,
    }
    if project_id is not None:
        info["project_id"] = project_id
    path = path or directory / f"service-account-{uuid.uuid4().hex[:12]}.json"
    path.write_text(json.dumps(info))
    return path


def google_auth_follows(monkeypatch: pytest.MonkeyPatch, clock: Clock) -> None:
    """Make google-auth read time from ``clock`` (JWT ``iat``/``exp``, token expiry)."""
    import google.auth._helpers

    def utcnow() -> datetime.datetime:
        return datetime.datetime.fromtimestamp(clock.time(), datetime.UTC).replace(tzinfo=None)

    monkeypatch.setattr(google.auth._helpers, "utcnow", utcnow)


def token_requests(emulator: RunningEmulator) -> int:
    """How many times the emulator's OAuth token endpoint was called."""
    return sum(1 for r in emulator.requests if r.path_only == "/token")


def token_signers(emulator: RunningEmulator) -> list[str]:
    """Which key signed each assertion the token endpoint received: ``old``
    (:func:`service_account_key`), ``new`` (:func:`other_key`) or ``unknown``."""
    keys = {"old": service_account_key(), "new": other_key()}
    found = []
    for request in emulator.requests:
        if request.path_only != "/token":
            continue
        assertion = urllib.parse.parse_qs(request.body.decode())["assertion"][0]
        header, claims, signature = assertion.split(".")
        raw = base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4))
        signed = f"{header}.{claims}".encode()
        found.append(next((name for name, key in keys.items() if _verifies(key, raw, signed)), "unknown"))
    return found


def _verifies(key: rsa.RSAPrivateKey, signature: bytes, data: bytes) -> bool:
    try:
        key.public_key().verify(signature, data, padding.PKCS1v15(), hashes.SHA256())
    except InvalidSignature:
        return False
    return True


def assert_no_key_material(text: str) -> None:
    """Neither test key's PEM (any of its lines) nor a PEM marker appears in ``text``."""
    assert "PRIVATE KEY" not in text
    for key in (service_account_key(), other_key()):
        pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ).decode()
        assert not [line for line in pem.splitlines()[1:-1] if line in text]


def predict_requests(emulator: RunningEmulator) -> list[Any]:
    return [r for r in emulator.requests if r.path_only.startswith("/v1/")]


@contextlib.asynccontextmanager
async def vertex_upstream(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    project: str = PROJECT,
    region: str = REGION,
    key_project: str | None = PROJECT,
    **config: Any,
) -> AsyncIterator[tuple[dict[str, str], RunningEmulator]]:
    """The Vertex emulator with a registered service account; yields ``(env, emulator)``."""
    options: dict[str, Any] = {
        "vertex_projects": frozenset({project}),
        "vertex_locations": frozenset({region}),
        "vertex_tokens": frozenset(),
        "vertex_service_accounts": {SERVICE_ACCOUNT: public_pem(service_account_key())},
    }
    options.update(config)
    async with run_emulator(EmulatorConfig(**options), provider="vertex") as emulator:
        credentials = write_service_account(tmp_path, emulator.base_url + "/token", project_id=key_project)
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(credentials))
        env = {
            "GATEWAY_PROVIDER": "vertex",
            "CLOUD_ML_REGION": region,
            "ANTHROPIC_VERTEX_PROJECT_ID": project,
            "ANTHROPIC_VERTEX_BASE_URL": emulator.base_url + "/v1",
            "GOOGLE_APPLICATION_CREDENTIALS": str(credentials),
        }
        yield env, emulator


def gateway_settings(env: Mapping[str, str], **extra: str) -> Settings:
    """Gateway settings for ``env`` with one inbound key and no gateway-side retries."""
    return Settings.from_environ(
        {"GATEWAY_API_KEYS": GATEWAY_KEY, "GATEWAY_MAX_RETRIES": "0", **env, **extra}
    )


@contextlib.asynccontextmanager
async def vertex_gateway(
    env: Mapping[str, str], *, clock: Callable[[], float] | None = None, **extra: str
) -> AsyncIterator[str]:
    """The gateway in-process in front of ``env``'s Vertex upstream; yields its base URL."""
    settings = gateway_settings(env, **extra)
    provider = VertexProvider(settings, clock=clock) if clock is not None else VertexProvider(settings)
    app = create_app(settings, provider, metrics=GatewayMetrics())
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
