"""The bearer check remembers verified tokens (the request path does a dictionary lookup, not a
signature check), and that memory never lets a token through that must not pass: a revoked token
is refused on its very next request, an expired one at its ``exp``, and the memory is bounded."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from gateway.config import Settings
from gateway.errors import GatewayError
from gateway.fleet import tokens
from gateway.fleet.signin_service import SigninService
from gateway.fleet.tokens import Identity
from tests.fleet_signin.signin_stack import MovableClock

ENV = {
    "GATEWAY_PUBLIC_URL": "https://gw.example.com",
    "GATEWAY_OIDC_ISSUER": "https://idp.example.com",
    "GATEWAY_OIDC_CLIENT_ID": "switchyard",
    "GATEWAY_API_KEYS": "sk-ci",
    "GATEWAY_ACCESS_TOKEN_TTL_S": "600",
}
ALICE = Identity("idp|alice", "alice@example.com", ("eng",))
BOB = Identity("idp|bob", "bob@example.com", ("ops",))


def with_service(tmp_path: Path, clock: MovableClock, test: Callable[[SigninService], object]) -> None:
    settings = Settings.from_environ({**ENV, "GATEWAY_SIGNIN_STATE_DIR": str(tmp_path)})

    async def run() -> None:
        service = await SigninService.build(settings.signin, "memory", clock, settings.egress)
        try:
            result = test(service)
            if asyncio.iscoroutine(result):
                await result
        finally:
            await service.close()

    asyncio.run(run())


def refused(service: SigninService, token: str) -> GatewayError:
    with pytest.raises(GatewayError) as raised:
        service.principal(token)
    assert raised.value.status == 401 and raised.value.should_retry is False
    return raised.value


def test_a_revoked_token_is_refused_on_its_next_request(tmp_path: Path) -> None:
    async def test(service: SigninService) -> None:
        token, minted = service.signer.mint(ALICE, "family-a")
        other, _ = service.signer.mint(BOB, "family-b")
        assert service.principal(token).subject == "idp|alice"
        assert service.principal(token).subject == "idp|alice"  # answered from memory now
        await service.denylist.revoke(minted.jti, minted.expires_at)
        assert "revoked" in refused(service, token).message
        assert service.principal(other).subject == "idp|bob"  # only that token

    with_service(tmp_path, MovableClock(), test)


def test_an_expired_token_is_refused_at_its_exp(tmp_path: Path) -> None:
    clock = MovableClock()

    def test(service: SigninService) -> None:
        token, minted = service.signer.mint(ALICE, "family-a")
        assert service.principal(token).groups == ("eng",)
        clock.offset = minted.expires_at - 1.5 - time.time()  # 1.5 s before exp
        assert service.principal(token).subject == "idp|alice"
        clock.advance(1.5)  # at exp: no longer valid
        assert "expired" in refused(service, token).message
        assert "expired" in refused(service, token).message  # and not remembered as valid after

    with_service(tmp_path, clock, test)


def test_the_memory_of_verified_tokens_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tokens, "VERIFIED_CACHE_SIZE", 8)

    def test(service: SigninService) -> None:
        minted = [service.signer.mint(Identity(f"idp|u{i}", None, ()), f"f{i}")[0] for i in range(40)]
        for token in minted:
            service.principal(token)
            assert len(service.signer._verified) <= 8
        assert service.principal(minted[0]).subject == "idp|u0"  # forgotten: verified again
        head, payload, signature = minted[1].split(".")
        refused(service, f"{head}.{payload}.{signature[:-2]}AA")  # forgotten or not: still checked

    with_service(tmp_path, MovableClock(), test)
