"""The sign-in pieces one at a time: user codes, the stores' contract (sqlite and a real
redis-server), claims and groups, the attempt limit's bound, signing keys and rotation, the
settings checks, and the Authenticator accepting tokens beside static keys."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.config import ConfigError, Settings
from gateway.fleet.claims import Refused, groups_from, identity_from
from gateway.fleet.device import USER_CODE_ALPHABET, DeviceGrants, new_user_code, normalise_user_code
from gateway.fleet.signin_store import PURGE_EVERY_S, RedisSigninStore, SigninStore, SqliteSigninStore
from gateway.fleet.signing_keys import SigningKey, parse_signing_keys
from gateway.fleet.tokens import Identity, InvalidToken, TokenSigner
from gateway.fleet.verification import AttemptLimit, Csrf
from tests.fleet_signin.signin_stack import MovableClock
from tests.support.redis_server import running_redis

ALICE = Identity("idp|alice", "alice@example.com", ("eng",))
SECRET_A = "a" * 40
SECRET_B = "b" * 40


def test_user_codes_use_the_rfc_8628_base_20_alphabet() -> None:
    assert len(USER_CODE_ALPHABET) == 20 and not set("AEIOUY") & set(USER_CODE_ALPHABET)
    pattern = re.compile(f"^[{USER_CODE_ALPHABET}]{{4}}-[{USER_CODE_ALPHABET}]{{4}}$")
    assert all(pattern.match(new_user_code()) for _ in range(500))
    assert normalise_user_code("wdjb mjht") == "WDJB-MJHT"
    assert normalise_user_code(" wdjb-MJHT ") == "WDJB-MJHT"
    assert normalise_user_code("WDJB-MJHA") is None  # a vowel is never in a code
    assert normalise_user_code("WDJB-MJH") is None


@contextlib.asynccontextmanager
async def store_of(kind: str, tmp_path: Path, clock: MovableClock) -> AsyncIterator[SigninStore]:
    if kind == "sqlite":
        store: SigninStore = SqliteSigninStore(tmp_path, clock)
        yield store
        await store.close()
        return
    with running_redis() as redis:
        store = RedisSigninStore.from_url(redis.url, 1.0)
        yield store
        await store.close()


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
async def test_store_contract(kind: str, tmp_path: Path) -> None:
    clock = MovableClock()
    async with store_of(kind, tmp_path, clock) as store:
        far = clock() + 3600
        await store.put("t", "k", {"v": 1}, far)
        assert await store.get("t", "k") == {"v": 1}
        assert not await store.replace("t", "k", {"v": 0}, {"v": 2}, far)  # not what is stored
        assert await store.replace("t", "k", {"v": 1}, {"v": 2}, far)
        assert await store.get("t", "k") == {"v": 2}
        assert await store.put_if_absent("t", "k", {"v": 3}, far) == {"v": 2}
        assert await store.put_if_absent("t", "new", {"v": 4}, None) == {"v": 4}
        takes = await asyncio.gather(*(store.take("t", "k") for _ in range(5)))  # single use
        assert takes.count({"v": 2}) == 1 and takes.count(None) == 4
        await store.add_revoked("jti-live", far)
        await store.add_revoked("jti-dead", clock() - 1)
        assert set(await store.revoked()) == {"jti-live"}


async def test_sqlite_store_expires_purges_and_survives_a_restart(tmp_path: Path) -> None:
    clock = MovableClock()
    store = SqliteSigninStore(tmp_path, clock)
    assert (tmp_path / "signin.sqlite3").stat().st_mode & 0o777 == 0o600  # it holds IdP refresh tokens
    await store.put("t", "short", {"v": 1}, clock() + 10)
    await store.put_if_absent("keys", "signing", {"kid": "x"}, None)
    clock.advance(11)
    assert await store.get("t", "short") is None
    clock.advance(PURGE_EVERY_S)
    await store.get("t", "other")  # a read purges expired rows once a minute
    assert store._db.execute("SELECT COUNT(*) FROM records WHERE kind = 't'").fetchone()[0] == 0
    await store.close()
    reopened = SqliteSigninStore(tmp_path, clock)
    assert await reopened.get("keys", "signing") == {"kid": "x"}  # the generated key stays
    await reopened.close()


async def test_an_approved_grant_is_redeemed_once_under_concurrent_polls(tmp_path: Path) -> None:
    clock = MovableClock()
    grants = DeviceGrants(SqliteSigninStore(None, clock), clock)
    started = await grants.start("claude_code")
    pending = await grants.find(started.user_code)
    assert pending is not None and pending.surface == "claude_code"
    assert await grants.decide(pending, {"identity": {"sub": "s"}})
    assert not await grants.decide(pending, None)  # decided once
    assert await grants.find(started.user_code) is None
    results = await asyncio.gather(*(grants.poll(started.device_code) for _ in range(4)))
    assert [result.error for result in results].count(None) == 1


def test_groups_from_a_claim_or_a_dotted_path() -> None:
    claims = {
        "groups": ["eng", "eng", "ml"],
        "realm_access": {"roles": ["admin"]},
        "https://example.com/groups": "one",
        "role": 5,
    }
    assert groups_from(claims, "groups") == ("eng", "ml")
    assert groups_from(claims, "realm_access.roles") == ("admin",)
    assert groups_from(claims, "$.realm_access.roles") == ("admin",)
    assert groups_from(claims, "https://example.com/groups") == ("one",)
    assert groups_from(claims, "role") == ()
    assert groups_from(claims, "realm_access.missing") == ()


def test_email_domain_allowlist() -> None:
    base = {"sub": "s", "email": "bob@Corp.Example", "email_verified": True}
    assert identity_from(base, "groups", {"corp.example"}).email == "bob@Corp.Example"
    assert identity_from({"sub": "s"}, "groups", ()).email is None  # no allowlist: any user
    for claims in ({**base, "email": "bob@other.example"}, {**base, "email_verified": False}, {"sub": "s"}):
        with pytest.raises(Refused):
            identity_from(claims, "groups", {"corp.example"})
    with pytest.raises(Refused):
        identity_from({"email": "a@corp.example"}, "groups", ())  # no subject


def test_an_unverified_email_is_dropped_with_or_without_the_allowlist() -> None:
    claims = {"sub": "s", "email": "alice@corp.example"}
    for unverified in (False, "false", "False"):
        assert identity_from({**claims, "email_verified": unverified}, "groups", ()).email is None
    assert identity_from({**claims, "email_verified": True}, "groups", ()).email == "alice@corp.example"
    assert identity_from({**claims, "email_verified": "true"}, "groups", ()).email == "alice@corp.example"
    assert identity_from(claims, "groups", ()).email == "alice@corp.example"  # not said: taken
    assert identity_from({**claims, "email_verified": False}, "groups", ()).principal().team == "s"
    with pytest.raises(Refused, match="verified e-mail"):
        identity_from({**claims, "email_verified": "false"}, "groups", {"corp.example"})


def test_attempt_limit_is_per_ip_sliding_and_bounded() -> None:
    clock = MovableClock()
    limit = AttemptLimit(2, clock, max_ips=3)
    assert limit.allow("a") and limit.allow("a") and not limit.allow("a")
    assert limit.allow("b")
    clock.advance(60)
    assert limit.allow("a")
    for ip in ("c", "d", "e", "f"):
        limit.allow(ip)
    assert len(limit) == 3


def test_csrf_token_is_bound_to_the_session() -> None:
    csrf = Csrf(b"k" * 32)
    assert csrf.check("session-1", csrf.token("session-1"))
    assert not csrf.check("session-2", csrf.token("session-1"))
    assert not csrf.check(None, csrf.token("session-1"))
    assert not Csrf(b"j" * 32).check("session-1", csrf.token("session-1"))


def test_signing_keys_file() -> None:
    keys = parse_signing_keys(f"# comment\nnew {SECRET_B}\n\nold {SECRET_A}  # kept one TTL\n")
    assert [key.kid for key in keys] == ["new", "old"] and keys[1].secret == SECRET_A
    assert SECRET_A not in repr(keys)
    for bad in ("", "k short", f"k {SECRET_A}\nk {SECRET_B}", "lonely"):
        with pytest.raises(ValueError):
            parse_signing_keys(bad)


def test_token_rotation_issuer_expiry_and_tampering() -> None:
    clock = MovableClock()
    old = TokenSigner([SigningKey("old", SECRET_A)], "https://gw", 3600, clock)
    rotated = TokenSigner(
        [SigningKey("new", SECRET_B), SigningKey("old", SECRET_A)], "https://gw", 3600, clock
    )
    token, _ = old.mint(ALICE, "fam")
    assert rotated.verify(token).principal.groups == ("eng",)  # the old key still verifies
    new_token, _ = rotated.mint(ALICE, "fam")
    with pytest.raises(InvalidToken):
        old.verify(new_token)  # signed with a key the old list does not hold
    with pytest.raises(InvalidToken):
        TokenSigner([SigningKey("old", SECRET_A)], "https://other", 3600, clock).verify(token)
    head, payload, signature = token.split(".")
    with pytest.raises(InvalidToken):
        rotated.verify(f"{head}.{payload}.{signature[:-2]}AA")
    clock.advance(3601)
    with pytest.raises(InvalidToken):
        rotated.verify(token)  # expired, though verified (and remembered) before
    assert rotated.verify(token, allow_expired=True).principal.subject == "idp|alice"


BASE_ENV = {
    "GATEWAY_OIDC_ISSUER": "https://idp.example",
    "GATEWAY_OIDC_CLIENT_ID": "gw",
    "GATEWAY_PUBLIC_URL": "https://gw.example",
}


def test_sign_in_settings_checks(tmp_path: Path) -> None:
    settings = Settings.from_environ(BASE_ENV, serving=True)  # no static key: sign-in is the way in
    assert settings.signin.oidc_groups_claim == "groups" and settings.signin.access_token_ttl_s == 3600
    cases = {
        "GATEWAY_PUBLIC_URL": {**BASE_ENV, "GATEWAY_PUBLIC_URL": ""},
        "GATEWAY_OIDC_CLIENT_ID": {**BASE_ENV, "GATEWAY_OIDC_CLIENT_ID": ""},
        "GATEWAY_OIDC_ISSUER: must be an https": {**BASE_ENV, "GATEWAY_OIDC_ISSUER": "http://idp.example"},
        "GATEWAY_ALLOW_INSECURE_LOOPBACK": {**BASE_ENV, "GATEWAY_PUBLIC_URL": "http://127.0.0.1:8080"},
    }
    for expected, env in cases.items():
        with pytest.raises(ConfigError) as caught:
            Settings.from_environ(env)
        assert expected in str(caught.value), (expected, caught.value)
    Settings.from_environ(
        {**BASE_ENV, "GATEWAY_PUBLIC_URL": "http://localhost:8080", "GATEWAY_ALLOW_INSECURE_LOOPBACK": "1"}
    )
    secret_file = tmp_path / "secret"
    secret_file.write_text("s3cret-value")
    with pytest.raises(ConfigError) as caught:
        Settings.from_environ(
            {
                **BASE_ENV,
                "GATEWAY_OIDC_CLIENT_SECRET": "s3cret-value",
                "GATEWAY_OIDC_CLIENT_SECRET_FILE": str(secret_file),
            }
        )
    assert "s3cret-value" not in str(caught.value)
    keys_file = tmp_path / "keys"
    keys_file.write_text("k too-short\n")
    with pytest.raises(ConfigError) as caught:
        Settings.from_environ({**BASE_ENV, "GATEWAY_TOKEN_SIGNING_KEYS_FILE": str(keys_file)})
    assert "GATEWAY_TOKEN_SIGNING_KEYS_FILE: line 1" in str(caught.value)
    with pytest.raises(ConfigError):
        Settings.from_environ({}, serving=True)  # still: no key and no sign-in is an open gateway


def test_token_groups_are_the_ones_the_gateway_reads() -> None:
    from gateway.fleet.token_groups import TokenGroups

    named = frozenset({"eng", "admins"})
    groups = ("z-first", "x", "admins", "ops", "eng")
    # without GATEWAY_TELEMETRY_GROUPS the first group is the caller's label: kept too, in order
    assert TokenGroups(lambda: named, ())(groups) == ("z-first", "admins", "eng")
    assert TokenGroups(lambda: named, ("ops",))(groups) == ("admins", "ops", "eng")
    assert TokenGroups(frozenset, ())(()) == ()
    # a billing-group tag may name any of the caller's groups, which then labels the request
    assert TokenGroups(lambda: named, (), billing_tag=True)(groups) == groups
    assert TokenGroups(lambda: named, ("ops",), billing_tag=True)(groups) == ("admins", "ops", "eng")
