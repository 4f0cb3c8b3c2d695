"""The verification page's CSRF key is the same on every replica that reads one signing-keys file,
whatever happens to the shared store (a Redis restart used to leave replicas with different keys,
so a form served by one replica failed its CSRF check on another)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from gateway.config import Settings
from gateway.fleet.signin_service import SigninService

ENV = {
    "GATEWAY_PUBLIC_URL": "https://gw.example.com",
    "GATEWAY_OIDC_ISSUER": "https://idp.example.com",
    "GATEWAY_OIDC_CLIENT_ID": "switchyard",
    "GATEWAY_API_KEYS": "sk-ci",
}


def _csrf_token(env: dict[str, str], state_dir: Path) -> str:
    state_dir.mkdir(exist_ok=True)
    settings = Settings.from_environ({**ENV, **env, "GATEWAY_SIGNIN_STATE_DIR": str(state_dir)})

    async def build() -> str:
        service = await SigninService.build(settings.signin, "memory", lambda: 0.0, settings.egress)
        try:
            return service.csrf.token("browser-session")
        finally:
            await service.close()

    return asyncio.run(build())


def test_replicas_sharing_a_keys_file_agree_on_the_csrf_key_with_separate_stores(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.write_text("k1 " + "s" * 40 + "\n")
    env = {"GATEWAY_TOKEN_SIGNING_KEYS_FILE": str(keys)}
    first = _csrf_token(env, tmp_path / "store-a")
    second = _csrf_token(env, tmp_path / "store-b")  # another store: as after a Redis restart
    assert first == second
    keys.write_text("k2 " + "t" * 40 + "\nk1 " + "s" * 40 + "\n")  # rotated: a new first key
    assert _csrf_token(env, tmp_path / "store-a") != first


def test_without_a_keys_file_the_csrf_key_lives_in_the_store(tmp_path: Path) -> None:
    assert _csrf_token({}, tmp_path / "one") == _csrf_token({}, tmp_path / "one")  # kept there
    assert _csrf_token({}, tmp_path / "one") != _csrf_token({}, tmp_path / "two")
