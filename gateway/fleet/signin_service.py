"""Sign-in through the company IdP: the device grant, the browser steps, the token endpoint,
revocation, and the bearer check every request makes.

Built once per app from the settings (:meth:`SigninService.build`); the HTTP layer is
:mod:`gateway.fleet.signin_routes`. Every sign-in, refresh, reuse detection, revocation and denial
is one line on the ``switchyard.audit`` logger (who, what, from where; never a token or a code).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from gateway.config_checks import without_userinfo
from gateway.egress import host_port
from gateway.errors import GatewayError
from gateway.fleet.claims import Refused, identity_from
from gateway.fleet.denylist import Denylist
from gateway.fleet.device import DeviceGrants, PendingGrant, digest
from gateway.fleet.idp_http import IdpHttp
from gateway.fleet.oidc_client import Authorization, IdpDenied, IdpError, OidcClient
from gateway.fleet.principal import Principal
from gateway.fleet.refresh_families import Presented, RefreshFamilies
from gateway.fleet.signin_store import RedisSigninStore, SigninStore, SqliteSigninStore
from gateway.fleet.signing_keys import KEYS, csrf_key_from, signing_keys_from
from gateway.fleet.token_groups import Minter, every_group
from gateway.fleet.tokens import Identity, InvalidToken, TokenSigner
from gateway.fleet.verification import AttemptLimit, Csrf
from gateway.settings.fleet_signin import SigninSettings
from gateway.settings.upstream_egress import EgressSettings

audit = logging.getLogger("switchyard.audit")
log = logging.getLogger("switchyard.fleet")

DEVICE_GRANT: Final = "urn:ietf:params:oauth:grant-type:device_code"
ATTEMPT: Final = "attempt"
ATTEMPT_TTL_S: Final = 600.0
DEVICE_STARTS_PER_MINUTE: Final = 60
INVALID_TOKEN: Final = "invalid or expired access token: sign in again (/login)"
REVOKED_TOKEN: Final = "this access token was revoked: sign in again (/login)"


@dataclass(frozen=True, slots=True)
class OAuthAnswer:
    status: int
    body: dict[str, Any]


def oauth_error(status: int, error: str, description: str) -> OAuthAnswer:
    return OAuthAnswer(status, {"error": error, "error_description": description})


def _identity_record(identity: Identity) -> dict[str, Any]:
    return {"sub": identity.subject, "email": identity.email, "groups": list(identity.groups)}


def _identity_of(record: dict[str, Any]) -> Identity:
    return Identity(record["sub"], record.get("email"), tuple(record.get("groups") or ()))


def _ignore(_: str) -> None:
    return None


def _who(identity: Identity) -> str:
    return f"subject={identity.subject!r} email={identity.email!r} groups={','.join(identity.groups)!r}"


class SigninService:
    def __init__(
        self,
        settings: SigninSettings,
        store: SigninStore,
        signer: TokenSigner,
        csrf: Csrf,
        oidc: OidcClient,
        http: IdpHttp,
        clock: Callable[[], float],
    ) -> None:
        self.settings = settings
        self.store = store
        self.signer = signer
        self.minter = Minter(signer, every_group)  # the app sets which groups and the header limit
        self.csrf = csrf
        self.oidc = oidc
        self._http = http
        self.clock = clock
        self.grants = DeviceGrants(store, clock)
        self.families = RefreshFamilies(store, clock, settings.refresh_token_ttl_s)
        self.denylist = Denylist(store, clock)
        self.verify_limit = AttemptLimit(settings.signin_verify_per_minute, clock)
        self.start_limit = AttemptLimit(DEVICE_STARTS_PER_MINUTE, clock)
        self.on_outcome: Callable[[str], None] = (
            _ignore  # counts outcomes (gateway_fleet_signins_total)  # bounds the grants one IP holds
        )

    @classmethod
    async def build(
        cls, settings: SigninSettings, session_store: str, clock: Callable[[], float], egress: EgressSettings,
        store_timeout_s: float = 0.25,
    ) -> SigninService:  # fmt: skip
        """``session_store``: ``GATEWAY_SESSION_STORE`` (a Redis URL shares sign-in state too, each
        socket operation within ``store_timeout_s``); ``egress``: how the IdP is reached."""
        assert settings.oidc_issuer is not None and settings.public_url is not None
        store: SigninStore
        if session_store.startswith(("redis://", "rediss://", "unix://")):
            store = RedisSigninStore.from_url(session_store, store_timeout_s)
        else:
            store = SqliteSigninStore(settings.signin_state_dir, clock)
        keys = await signing_keys_from(settings, store)
        if settings.token_signing_keys_file is not None:
            # every replica reads the same file: the same CSRF key, whatever happens to the store
            csrf_key = csrf_key_from(keys[0])
        else:  # generated keys live in the store: so does the CSRF key
            csrf_record = await store.put_if_absent(KEYS, "csrf", {"key": secrets.token_hex(32)}, None)
            csrf_key = bytes.fromhex(csrf_record["key"])
        http = IdpHttp(egress)
        secret = settings.oidc_client_secret
        if settings.oidc_client_secret_file is not None:
            secret_text = settings.oidc_client_secret_file.read_text("utf-8").strip()
        else:
            secret_text = secret.get_secret_value() if secret is not None else ""
        oidc = OidcClient(
            http,
            issuer=settings.oidc_issuer,
            client_id=settings.oidc_client_id or "",
            client_secret=secret_text or None,
            redirect_uri=f"{settings.public_url}/oauth/callback",
            scopes=settings.oidc_scopes,
            clock=clock,
        )
        signer = TokenSigner(
            keys, settings.public_url, settings.access_token_ttl_s, clock, settings.billing_group_tag
        )
        where = "redis" if store.shared else ("sqlite file" if settings.signin_state_dir else "memory")
        source = (
            "GATEWAY_TOKEN_SIGNING_KEYS_FILE"
            if settings.token_signing_keys_file
            else "generated, in the store"
        )
        proxy = http.proxy_for(settings.oidc_issuer)
        log.info(
            "fleet sign-in on: issuer %s (proxy %s, CA %s), public URL %s, sign-in store %s, signing keys %s (%d)",
            without_userinfo(settings.oidc_issuer), host_port(proxy) if proxy else "none",
            "GATEWAY_CA_BUNDLE" if egress.ca_bundle is not None else "system store",
            without_userinfo(settings.public_url), where, source, len(keys),
        )  # fmt: skip
        if where == "memory":
            log.warning(
                "fleet sign-in state is in memory: a restart signs everyone out (set GATEWAY_SIGNIN_STATE_DIR)"
            )
        return cls(settings, store, signer, Csrf(csrf_key), oidc, http, clock)

    async def close(self) -> None:
        await self._http.close()
        await self.store.close()

    # -- the bearer check (request path: a dictionary lookup for a token already seen) -----------
    def principal(self, token: str) -> Principal:
        try:
            verified = self.signer.verify(token)
        except InvalidToken:
            raise GatewayError(401, INVALID_TOKEN, should_retry=False) from None
        if verified.jti in self.denylist.revoked:
            raise GatewayError(401, REVOKED_TOKEN, should_retry=False)
        return verified.principal

    def remembered(self, token: str) -> Principal | None:
        """:meth:`principal` of a bearer verified before and still remembered (no signature check;
        expiry and revocation are checked all the same); ``None`` for one not remembered."""
        try:
            verified = self.signer.remembered(token)
        except InvalidToken:
            raise GatewayError(401, INVALID_TOKEN, should_retry=False) from None
        if verified is None:
            return None
        if verified.jti in self.denylist.revoked:
            raise GatewayError(401, REVOKED_TOKEN, should_retry=False)
        return verified.principal

    def audit_refusal(self, reason: str, ip: str) -> None:
        audit.info("signin.refused reason=%s ip=%s", reason, ip)

    # -- device authorization and the browser steps -----------------------------------------
    async def device_authorization(self, surface: str, ip: str) -> dict[str, Any]:
        started = await self.grants.start(surface)
        base = self.settings.public_url
        audit.info("signin.device_authorization surface=%r ip=%s", surface[:64], ip)
        answer: dict[str, Any] = {
            "device_code": started.device_code,
            "user_code": started.user_code,
            "verification_uri": f"{base}/oauth/device",
            "verification_uri_complete": f"{base}/oauth/device?user_code={started.user_code}",
            "expires_in": started.expires_in,
            "interval": started.interval,
        }
        if self.settings.signin_login_notice:
            answer["login_notice"] = self.settings.signin_login_notice
        return answer

    async def begin_login(self, grant: PendingGrant, session_id: str) -> str:
        """Remember the attempt (bound to the browser session); the IdP URL to send the browser to."""
        authorization = await self.oidc.authorization()
        record = {
            "session": digest(session_id),
            "grant": grant.key,
            "user_code": grant.user_code,
            "surface": grant.surface,
            "nonce": authorization.nonce,
            "verifier": authorization.code_verifier,
            "identity": None,
        }
        await self.store.put(ATTEMPT, authorization.state, record, self.clock() + ATTEMPT_TTL_S)
        return authorization.url

    async def attempt(self, state: str, session_id: str | None) -> dict[str, Any] | None:
        record = await self.store.get(ATTEMPT, state)
        if (
            record is None
            or session_id is None
            or not secrets.compare_digest(record["session"], digest(session_id))
        ):
            return None
        return record

    async def finish_login(self, state: str, record: dict[str, Any], code: str, ip: str) -> Identity:
        """Exchange the IdP's code; the identity, kept in the attempt for the confirmation step."""
        authorization = Authorization("", state, record["nonce"], record["verifier"])
        tokens = await self.oidc.exchange(code, authorization)
        try:
            identity = identity_from(
                tokens.claims, self.settings.oidc_groups_claim, self.settings.signin_email_domains
            )
            self.minter.check(identity)  # a token too large for a request header: refused now
        except Refused as exc:
            audit.info("signin.refused reason=%r subject=%r ip=%s", str(exc), tokens.claims.get("sub"), ip)
            self.on_outcome("denied")
            raise
        updated = {**record, "identity": _identity_record(identity), "idp_refresh": tokens.refresh_token}
        await self.store.put(ATTEMPT, state, updated, self.clock() + ATTEMPT_TTL_S)
        return identity

    async def decide(self, state: str, record: dict[str, Any], approve: bool, ip: str) -> bool:
        await self.store.delete(ATTEMPT, state)
        identity = _identity_of(record["identity"])
        grant = await self.grants.find(record["user_code"])
        if grant is None or grant.key != record["grant"]:
            return False
        approval = (
            {"identity": record["identity"], "idp_refresh": record.get("idp_refresh")} if approve else None
        )
        done = await self.grants.decide(grant, approval)
        if done:
            event = "signin.approved" if approve else "signin.denied_by_user"
            audit.info("%s %s surface=%r ip=%s", event, _who(identity), grant.surface, ip)
            if not approve:
                self.on_outcome("denied")
        return done

    # -- the token endpoint --------------------------------------------------------------------
    async def token(self, form: dict[str, str], ip: str) -> OAuthAnswer:
        grant_type = form.get("grant_type", "")
        if grant_type == DEVICE_GRANT:
            return await self._device_token(form.get("device_code", ""), ip)
        if grant_type == "refresh_token":
            return await self._refresh(form.get("refresh_token", ""), ip)
        return oauth_error(
            400, "unsupported_grant_type", "grant_type must be the device code or refresh_token grant"
        )

    async def _device_token(self, device_code: str, ip: str) -> OAuthAnswer:
        if not device_code:
            return oauth_error(400, "invalid_request", "device_code is required")
        result = await self.grants.poll(device_code)
        if result.error is not None:
            if result.error in ("slow_down",):
                return oauth_error(400, "slow_down", "polling too fast: wait 5 more seconds between polls")
            if result.error == "invalid_grant":
                audit.info("signin.token_refused reason=unknown_device_code ip=%s", ip)
            elif result.error == "expired_token":  # the client stops polling on it
                self.on_outcome("expired")
            descriptions = {
                "authorization_pending": "the user has not approved the sign-in yet",
                "access_denied": "the user denied the sign-in",
                "expired_token": "the code expired: run /login again",
                "invalid_grant": "unknown or already used device code",
            }
            return oauth_error(400, result.error, descriptions[result.error])
        assert result.approval is not None
        identity = _identity_of(result.approval["identity"])
        family = self.families.new_id()
        try:
            access, verified = self.minter.mint(identity, family)
        except Refused as exc:  # the policy named more groups since the user approved
            audit.info("signin.refused reason=%r %s ip=%s", str(exc), _who(identity), ip)
            return oauth_error(400, "access_denied", str(exc))
        record = {
            "identity": result.approval["identity"],
            "idp_refresh": result.approval.get("idp_refresh"),
            "access_jti": verified.jti,  # revoking the family denies its last access token too
            "access_exp": verified.expires_at,
        }
        refresh_token = await self.families.create(family, record)
        audit.info("signin.token_issued %s ip=%s", _who(identity), ip)
        self.on_outcome("success")
        return self._tokens(access, refresh_token, identity)

    def _tokens(self, access: str, refresh: str, identity: Identity) -> OAuthAnswer:
        body: dict[str, Any] = {
            "access_token": access,
            "token_type": "Bearer",
            "expires_in": self.signer.ttl_s,
            "refresh_token": refresh,
        }
        if identity.email:
            body["email"] = identity.email
        return OAuthAnswer(200, body)

    async def _refresh(self, refresh_token: str, ip: str) -> OAuthAnswer:
        invalid = oauth_error(401, "invalid_grant", "the sign-in is no longer valid: run /login again")
        view = await self.families.lookup(refresh_token) if refresh_token else None
        if view is None or view.presented is Presented.UNKNOWN:
            audit.info("signin.refresh_refused reason=unknown_refresh_token ip=%s", ip)
            return invalid
        identity = _identity_of(view.record["identity"])
        if view.presented is Presented.REUSED:
            await self._revoke_family(view.family)
            audit.warning("signin.refresh_reuse_detected family_revoked %s ip=%s", _who(identity), ip)
            return invalid
        idp_refresh = view.record.get("idp_refresh")
        if idp_refresh:
            try:
                tokens = await self.oidc.refresh(idp_refresh)
                identity = identity_from(
                    tokens.claims, self.settings.oidc_groups_claim, self.settings.signin_email_domains
                )
                idp_refresh = tokens.refresh_token or idp_refresh
            except (IdpDenied, Refused) as exc:
                await self._revoke_family(view.family)
                audit.info("signin.deprovisioned reason=%r %s ip=%s", str(exc), _who(identity), ip)
                return invalid
            except IdpError as exc:
                log.warning("sign-in refresh: the IdP could not be asked: %s", exc)
                return oauth_error(
                    503, "temporarily_unavailable", "the identity provider is unreachable; retry later"
                )
        try:
            access, verified = self.minter.mint(identity, view.family)
        except Refused as exc:
            await self._revoke_family(view.family)
            audit.info("signin.refused reason=%r %s ip=%s", str(exc), _who(identity), ip)
            return oauth_error(400, "invalid_grant", str(exc))
        changes = {
            "identity": _identity_record(identity),
            "idp_refresh": idp_refresh,
            "access_jti": verified.jti,
            "access_exp": verified.expires_at,
        }
        rotated = await self.families.rotate(view, changes)
        if rotated is None:  # the same refresh token won a race elsewhere: that is a reuse
            await self._revoke_family(view.family)
            audit.warning("signin.refresh_reuse_detected family_revoked %s ip=%s", _who(identity), ip)
            return invalid
        audit.info("signin.refreshed %s ip=%s", _who(identity), ip)
        self.on_outcome("refreshed")
        return self._tokens(access, rotated, identity)

    async def _revoke_family(self, family: str) -> None:
        record = await self.families.revoke(family)
        if record is not None and record.get("access_jti"):
            await self.denylist.revoke(record["access_jti"], float(record.get("access_exp") or 0))

    # -- RFC 7009 revocation -----------------------------------------------------------------------
    async def revoke(self, token: str, ip: str) -> None:
        if token.count(".") == 2:
            try:
                verified = self.signer.verify(token, allow_expired=True)
            except InvalidToken:
                return
            await self.denylist.revoke(verified.jti, verified.expires_at)
            audit.info("signin.revoked kind=access_token subject=%r ip=%s", verified.principal.subject, ip)
            self.on_outcome("revoked")
            return
        view = await self.families.lookup(token)
        if view is None or view.presented is Presented.UNKNOWN:
            return
        await self._revoke_family(view.family)
        audit.info(
            "signin.revoked kind=refresh_token %s ip=%s", _who(_identity_of(view.record["identity"])), ip
        )
        self.on_outcome("revoked")
