"""The gateway as an OIDC relying party of the company IdP: discovery, authorization-code flow with
PKCE, ID-token validation against the IdP's JWKS, and refresh at the IdP.

Discovery (``{issuer}/.well-known/openid-configuration``) and the JWKS are fetched on first use and
kept; the JWKS is fetched again (at most once a minute) when a token names a key it does not hold
(the IdP rotated). PKCE (S256), ``state`` and ``nonce`` come from authlib; the ID token is verified
with joserfc: signature, ``iss`` equal to ``GATEWAY_OIDC_ISSUER``, ``aud`` holding the client id,
``exp``/``iat`` (60 s leeway), and on the code flow the ``nonce`` sent. No JWT or PKCE code is
hand-written here. The calls go out through the gateway's egress settings (:mod:`gateway.fleet.idp_http`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote

import aiohttp
from authlib.common.security import generate_token
from authlib.oauth2.rfc6749.parameters import prepare_grant_uri
from authlib.oauth2.rfc7636 import create_s256_code_challenge
from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import KeySet

from gateway.fleet.idp_http import IdpError, IdpHttp

__all__ = ["Authorization", "IdpDenied", "IdpError", "IdpTokens", "OidcClient"]

LEEWAY_S: Final = 60
JWKS_REFETCH_S: Final = 60.0
ASYMMETRIC: Final = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)


class IdpDenied(Exception):
    """The IdP refused the grant (``invalid_grant``): the user or their session is gone there."""


@dataclass(frozen=True, slots=True)
class Authorization:
    """What the browser is sent to the IdP with, and what the callback needs to finish."""

    url: str
    state: str
    nonce: str
    code_verifier: str


@dataclass(frozen=True, slots=True)
class IdpTokens:
    claims: dict[str, Any]  # the verified ID token's claims
    refresh_token: str | None


class OidcClient:
    def __init__(
        self,
        http: IdpHttp,
        *,
        issuer: str,
        client_id: str,
        client_secret: str | None,
        redirect_uri: str,
        scopes: str,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._http = http
        self.issuer = issuer
        self._client_id = client_id
        self._client_secret = client_secret
        self.redirect_uri = redirect_uri
        self._scopes = scopes
        self._clock = clock
        self._metadata: dict[str, Any] | None = None
        self._jwks: KeySet | None = None
        self._jwks_at = float("-inf")

    async def _get_json(self, url: str) -> dict[str, Any]:
        status, payload = await self._http.request("GET", url, headers={"accept": "application/json"})
        if status != 200:
            raise IdpError(f"{url} answered {status}")
        if not isinstance(payload, dict):
            raise IdpError(f"{url} did not answer a JSON object")
        return payload

    async def metadata(self) -> dict[str, Any]:
        if self._metadata is None:
            document = await self._get_json(self.issuer.rstrip("/") + "/.well-known/openid-configuration")
            if document.get("issuer") != self.issuer:
                raise IdpError("the discovery document names another issuer than GATEWAY_OIDC_ISSUER")
            for field in ("authorization_endpoint", "token_endpoint", "jwks_uri"):
                if not isinstance(document.get(field), str):
                    raise IdpError(f"the discovery document has no {field}")
            self._metadata = document
        return self._metadata

    async def authorization(self) -> Authorization:
        metadata = await self.metadata()
        state, nonce, verifier = generate_token(32), generate_token(32), generate_token(64)
        url = prepare_grant_uri(
            metadata["authorization_endpoint"],
            self._client_id,
            "code",
            redirect_uri=self.redirect_uri,
            scope=self._scopes,
            state=state,
            nonce=nonce,
            code_challenge=create_s256_code_challenge(verifier),
            code_challenge_method="S256",
        )
        return Authorization(str(url), state, nonce, verifier)

    async def exchange(self, code: str, authorization: Authorization) -> IdpTokens:
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": self.redirect_uri,
            "code_verifier": authorization.code_verifier,
        }
        return await self._token(form, nonce=authorization.nonce)

    async def refresh(self, refresh_token: str) -> IdpTokens:
        """Ask the IdP again; ``IdpDenied`` when it refuses (user disabled, session revoked)."""
        return await self._token({"grant_type": "refresh_token", "refresh_token": refresh_token}, nonce=None)

    async def _token(self, form: dict[str, str], nonce: str | None) -> IdpTokens:
        metadata = await self.metadata()
        headers = {"accept": "application/json"}
        if self._client_secret is not None:  # client_secret_basic, each part form-encoded (RFC 6749 §2.3.1)
            headers["authorization"] = aiohttp.encode_basic_auth(
                quote(self._client_id, safe=""), quote(self._client_secret, safe="")
            )
        else:
            form = {**form, "client_id": self._client_id}
        status, payload = await self._http.request(
            "POST", metadata["token_endpoint"], form=form, headers=headers
        )
        if not isinstance(payload, dict):
            raise IdpError("the token endpoint did not answer a JSON object")
        if status in (400, 401) and payload.get("error") in (
            "invalid_grant",
            "unauthorized_client",
            "access_denied",
        ):
            raise IdpDenied(str(payload.get("error")))
        if status != 200:
            raise IdpError(f"the token endpoint answered {status}")
        id_token = payload.get("id_token")
        refresh = payload.get("refresh_token")
        if not isinstance(id_token, str):
            raise IdpError("the token endpoint answered no id_token")
        claims = await self.verify_id_token(id_token, nonce)
        return IdpTokens(claims, refresh if isinstance(refresh, str) else None)

    async def _key_set(self, refetch: bool) -> KeySet:
        now = time.monotonic()
        if self._jwks is None or (refetch and now - self._jwks_at >= JWKS_REFETCH_S):
            metadata = await self.metadata()
            document = await self._get_json(metadata["jwks_uri"])
            try:
                self._jwks = KeySet.import_key_set(document)  # type: ignore[arg-type]
            except (JoseError, ValueError, TypeError, KeyError) as exc:
                raise IdpError(f"the IdP's JWKS could not be read: {type(exc).__name__}") from None
            self._jwks_at = now
        return self._jwks

    async def verify_id_token(self, id_token: str, nonce: str | None) -> dict[str, Any]:
        metadata = await self.metadata()
        offered = metadata.get("id_token_signing_alg_values_supported") or ["RS256"]
        algorithms = [alg for alg in offered if alg in ASYMMETRIC] or ["RS256"]
        decoded = None
        for refetch in (False, True):
            key_set = await self._key_set(refetch)
            try:
                decoded = jwt.decode(id_token, key_set, algorithms=algorithms)
                break
            except (JoseError, ValueError, TypeError) as exc:
                if refetch:  # the second try had fresh keys (an unknown kid triggers the refetch)
                    raise IdpError(f"the ID token does not verify: {type(exc).__name__}") from None
        if decoded is None:  # pragma: no cover - the loop either breaks or raises
            raise IdpError("the ID token does not verify")
        options: dict[str, Any] = {
            "iss": {"essential": True, "value": self.issuer},
            "aud": {"essential": True, "value": self._client_id},
            "exp": {"essential": True},
            "sub": {"essential": True},
        }
        if nonce is not None:
            options["nonce"] = {"essential": True, "value": nonce}
        registry = jwt.JWTClaimsRegistry(now=int(self._clock()), leeway=LEEWAY_S, **options)
        try:
            registry.validate(decoded.claims)
        except (JoseError, ValueError, TypeError) as exc:
            raise IdpError(f"the ID token's claims are not valid: {type(exc).__name__}") from None
        _check_azp(decoded.claims, self._client_id)
        return dict(decoded.claims)


def _check_azp(claims: Mapping[str, Any], client_id: str) -> None:
    audience = claims.get("aud")
    if isinstance(audience, list) and len(audience) > 1 and claims.get("azp") != client_id:
        raise IdpError("the ID token is for several audiences and not authorised for this client")
