"""The bearer check remembers verified tokens (the request path does a dictionary lookup, not a
signature check nor a static-key digest), and that memory never lets a token through that must
not pass: a revoked token is refused on its very next request, an expired one at its ``exp``, and
the memory is bounded. Checked through the inbound check the request path runs
(``Authenticator.principal_for``), static keys side by side."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from aiohttp.test_utils import make_mocked_request

from gateway.config import Settings
from gateway.errors import GatewayError
from gateway.fleet import tokens
from gateway.fleet.principal import Principal, Source
from gateway.fleet.signin_service import SigninService
from gateway.fleet.tokens import Identity
from gateway.inbound import Authenticator
from gateway.keys import KeyRing, parse_key_text
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


def caller(service: SigninService, bearer: str) -> Principal:
    """The caller the request path finds for ``Authorization: Bearer <bearer>``."""
    auth = Authenticator(KeyRing(parse_key_text("sk-ci ci\n", "keys")), False)
    auth.accept_tokens(service.principal, service.remembered)
    request = make_mocked_request("POST", "/v1/messages", headers={"authorization": f"Bearer {bearer}"})
    return auth.principal_for(request)


def refused(service: SigninService, token: str) -> GatewayError:
    with pytest.raises(GatewayError) as raised:
        caller(service, token)
    assert raised.value.status == 401 and raised.value.should_retry is False
    return raised.value


def test_a_revoked_token_is_refused_on_its_next_request(tmp_path: Path) -> None:
    async def test(service: SigninService) -> None:
        token, minted = service.signer.mint(ALICE, "family-a")
        other, _ = service.signer.mint(BOB, "family-b")
        assert caller(service, token).subject == "idp|alice"
        assert caller(service, token).subject == "idp|alice"  # answered from memory now
        await service.denylist.revoke(minted.jti, minted.expires_at)
        assert "revoked" in refused(service, token).message
        assert caller(service, other).subject == "idp|bob"  # only that token
        static = caller(service, "sk-ci")  # a static key side by side, before and after
        assert static.source is Source.KEY and static.team == "ci"

    with_service(tmp_path, MovableClock(), test)


def test_an_expired_token_is_refused_at_its_exp(tmp_path: Path) -> None:
    clock = MovableClock()

    def test(service: SigninService) -> None:
        token, minted = service.signer.mint(ALICE, "family-a")
        assert caller(service, token).groups == ("eng",)
        clock.offset = minted.expires_at - 1.5 - time.time()  # 1.5 s before exp
        assert caller(service, token).subject == "idp|alice"
        clock.advance(1.5)  # at exp: no longer valid
        assert "expired" in refused(service, token).message
        assert "expired" in refused(service, token).message  # and not remembered as valid after

    with_service(tmp_path, clock, test)


def test_the_memory_of_verified_tokens_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tokens, "VERIFIED_CACHE_SIZE", 8)

    def test(service: SigninService) -> None:
        minted = [service.signer.mint(Identity(f"idp|u{i}", None, ()), f"f{i}")[0] for i in range(40)]
        for token in minted:
            caller(service, token)
            assert len(service.signer._verified) <= 8
        assert caller(service, minted[0]).subject == "idp|u0"  # forgotten: verified again
        head, payload, signature = minted[1].split(".")
        refused(service, f"{head}.{payload}.{signature[:-2]}AA")  # forgotten or not: still checked

    with_service(tmp_path, MovableClock(), test)
