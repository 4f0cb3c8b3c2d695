"""Google's OAuth 2.0 token endpoint for service accounts (the JWT-bearer grant, RFC 7523).

``POST /token`` with ``grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer`` and
``assertion=<JWT>``, as google-auth's service-account credentials send it. The JWT must be RS256,
signed by the private key of a service account registered in
``EmulatorConfig.vertex_service_accounts`` (``client_email`` -> PEM public key), with ``iss`` = that
email, ``aud`` = Google's token URI (google-auth always uses ``https://oauth2.googleapis.com/token``)
or this endpoint's own URL, a ``scope``, and ``iat`` / ``exp`` valid on the emulator's clock (at
most one hour apart; 5 minutes of clock skew tolerated). The answer is
``{"access_token", "expires_in", "token_type": "Bearer"}``; the token is accepted by the Vertex
routes until ``vertex_token_lifetime_s`` later on the emulator's clock. Errors use the OAuth shape
``{"error", "error_description"}`` with Google's wording.

A key is deleted by replacing the account's public key (``RunningEmulator.accept_keys``): from then
on an assertion signed with the old key is refused with ``invalid_grant`` / ``Invalid JWT
Signature.``, which Google's "Using OAuth 2.0 for Server to Server Applications" lists (section
"Error codes", https://developers.google.com/identity/protocols/oauth2/service-account) for an
assertion signed with a key not associated with the service account, or a key that was deleted,
disabled or has expired. The access tokens issued before stay valid until they expire: "Deleting a
service account key does not revoke short-lived credentials that have been issued based on the
service account key" (IAM REST reference, ``projects.serviceAccounts.keys.delete``).
"""

from __future__ import annotations

import base64
import binascii
from typing import Any, Final

import orjson
from aiohttp import web
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from .access_tokens import form_text, get_tokens
from .state import get_state

JWT_BEARER_GRANT: Final = "urn:ietf:params:oauth:grant-type:jwt-bearer"
GOOGLE_TOKEN_URI: Final = "https://oauth2.googleapis.com/token"
TOKEN_PATH: Final = "/token"
MAX_ASSERTION_LIFETIME_S: Final = 3600
CLOCK_SKEW_S: Final = 300
_TIMEFRAME = (
    "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe. "
    "Check your iat and exp values in the JWT claim."
)


class OAuthError(Exception):
    def __init__(self, error: str, description: str, status: int = 400) -> None:
        super().__init__(description)
        self.error = error
        self.description = description
        self.status = status


def _b64url(segment: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))
    except (binascii.Error, ValueError):
        raise OAuthError("invalid_grant", "Invalid JWT: malformed segment.") from None


def _json_segment(segment: str) -> dict[str, Any]:
    try:
        value = orjson.loads(_b64url(segment))
    except orjson.JSONDecodeError:
        raise OAuthError("invalid_grant", "Invalid JWT: malformed segment.") from None
    if not isinstance(value, dict):
        raise OAuthError("invalid_grant", "Invalid JWT: malformed segment.")
    return value


def verify_assertion(
    assertion: str, accounts: dict[str, str], now: float, audiences: frozenset[str]
) -> dict[str, Any]:
    """The claims of a valid service-account assertion; raises :class:`OAuthError` otherwise."""
    parts = assertion.split(".")
    if len(parts) != 3:
        raise OAuthError("invalid_grant", "Invalid JWT: expected three segments.")
    header, claims = _json_segment(parts[0]), _json_segment(parts[1])
    if header.get("alg") != "RS256":
        raise OAuthError("invalid_grant", "Invalid JWT Signature.")
    issuer = claims.get("iss")
    pem = accounts.get(issuer) if isinstance(issuer, str) else None
    if pem is None:
        raise OAuthError("invalid_grant", "Invalid grant: account not found")
    key = serialization.load_pem_public_key(pem.encode())
    if not isinstance(key, rsa.RSAPublicKey):
        raise OAuthError("invalid_grant", "Invalid JWT Signature.")
    try:
        key.verify(_b64url(parts[2]), f"{parts[0]}.{parts[1]}".encode(), padding.PKCS1v15(), hashes.SHA256())
    except InvalidSignature:  # not the account's key, or a deleted one (Google's error table, above)
        raise OAuthError("invalid_grant", "Invalid JWT Signature.") from None
    if claims.get("aud") not in audiences:
        raise OAuthError("invalid_grant", "Invalid JWT: Failed audience check.")
    issued_at, expires = claims.get("iat"), claims.get("exp")
    if not isinstance(issued_at, int | float) or not isinstance(expires, int | float):
        raise OAuthError("invalid_grant", _TIMEFRAME)
    if issued_at > now + CLOCK_SKEW_S or expires <= now - CLOCK_SKEW_S:
        raise OAuthError("invalid_grant", _TIMEFRAME)
    if expires - issued_at > MAX_ASSERTION_LIFETIME_S:
        raise OAuthError("invalid_grant", _TIMEFRAME)
    if not isinstance(claims.get("scope"), str) or not claims["scope"].strip():
        raise OAuthError("invalid_scope", "Invalid OAuth scope or ID token audience provided.")
    return claims


def _oauth_error(error: OAuthError) -> web.Response:
    body = {"error": error.error, "error_description": error.description}
    return web.Response(status=error.status, body=orjson.dumps(body), content_type="application/json")


async def handle_token(request: web.Request) -> web.Response:
    """``POST /token``: exchange a signed service-account assertion for an access token."""
    config = get_state(request.app).config
    form = await request.post()
    grant_type = form_text(form, "grant_type")
    if grant_type != JWT_BEARER_GRANT:
        return _oauth_error(OAuthError("unsupported_grant_type", f"Invalid grant_type: {grant_type}"))
    assertion = form_text(form, "assertion")
    if assertion is None:
        return _oauth_error(OAuthError("invalid_request", "Missing required parameter: assertion"))
    now = config.clock.time()
    own_uri = str(request.url.with_query(None))
    try:
        claims = verify_assertion(
            assertion, dict(config.vertex_service_accounts), now, frozenset({GOOGLE_TOKEN_URI, own_uri})
        )
    except OAuthError as error:
        return _oauth_error(error)
    lifetime = config.vertex_token_lifetime_s
    issued = get_tokens(request.app).issue("ya29.emu-", claims["iss"], claims["scope"], now + lifetime)
    body = {"access_token": issued.token, "expires_in": lifetime, "token_type": "Bearer"}
    return web.Response(body=orjson.dumps(body), content_type="application/json")
