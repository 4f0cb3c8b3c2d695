"""Access tokens: HS256-signed JWTs (joserfc) carrying who signed in, checked on every request.

Claims: ``iss`` (the public URL), ``sub`` (the IdP subject), ``email``, ``groups``, ``iat``,
``exp``, ``jti``, ``fam`` (the refresh family the token came from), and ``billing_group_tag`` with
``GATEWAY_BILLING_GROUP_TAG`` set. Claude Code reads ``exp``, ``sub`` and ``billing_group_tag``
unverified; the gateway verifies the signature against the key rotation list
(:mod:`gateway.fleet.signing_keys`), ``iss`` and ``exp``, then the revocation denylist
(:mod:`gateway.fleet.denylist`). A verified token is remembered (bounded) so the request path
does a dictionary lookup, not a signature check, for a token it has already seen.
"""

from __future__ import annotations

import secrets
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import KeySet, OctKey

from gateway.fleet.principal import Principal, Source
from gateway.fleet.signing_keys import SigningKey

ALGORITHM: Final = "HS256"
VERIFIED_CACHE_SIZE: Final = 4096


@dataclass(frozen=True, slots=True)
class Identity:
    """Who signed in, as the IdP said (kept with the refresh family)."""

    subject: str
    email: str | None
    groups: tuple[str, ...]

    def principal(self) -> Principal:
        return Principal(
            subject=self.subject,
            team=self.email or self.subject,
            groups=self.groups,
            email=self.email,
            source=Source.TOKEN,
        )


@dataclass(frozen=True, slots=True)
class VerifiedToken:
    principal: Principal
    jti: str
    family: str
    expires_at: int


class InvalidToken(Exception):
    """Not a token of ours: bad signature, wrong issuer, malformed, or expired."""


class TokenSigner:
    def __init__(
        self,
        keys: Sequence[SigningKey],
        issuer: str,
        ttl_s: int,
        clock: Callable[[], float],
        billing_group_tag: str | None = None,
    ) -> None:
        if not keys:
            raise ValueError("no signing key")
        self._signing = keys[0]
        self._signing_key = OctKey.import_key(keys[0].secret, {"kid": keys[0].kid})
        self._key_set = KeySet([OctKey.import_key(key.secret, {"kid": key.kid}) for key in keys])
        self._issuer = issuer
        self.billing_group_tag = billing_group_tag
        self.ttl_s = ttl_s
        self._clock = clock
        self._verified: OrderedDict[str, VerifiedToken] = OrderedDict()

    def mint(self, identity: Identity, family: str) -> tuple[str, VerifiedToken]:
        now = int(self._clock())
        jti = secrets.token_urlsafe(16)
        claims: dict[str, Any] = {
            "iss": self._issuer,
            "sub": identity.subject,
            "groups": list(identity.groups),
            "iat": now,
            "exp": now + self.ttl_s,
            "jti": jti,
            "fam": family,
        }
        if identity.email:
            claims["email"] = identity.email
        if self.billing_group_tag is not None:
            # fleet-gateway.md s1: "If the token is a JWT the client reads exp, sub,
            # billing_group_tag unverified"; with it, Claude Code sends "tags": {<tag>: <group>}
            claims["billing_group_tag"] = self.billing_group_tag
        header = {"alg": ALGORITHM, "kid": self._signing.kid}
        token = jwt.encode(header, claims, self._signing_key, algorithms=[ALGORITHM])
        return token, VerifiedToken(identity.principal(), jti, family, now + self.ttl_s)

    def verify(self, token: str, *, allow_expired: bool = False) -> VerifiedToken:
        """The token's identity; ``InvalidToken`` when it is not ours or (unless allowed) expired."""
        known = self.remembered(token, allow_expired=allow_expired)
        if known is not None:
            return known
        verified = self._decode(token)
        if verified.expires_at <= self._clock() and not allow_expired:
            raise InvalidToken("expired")
        self._verified[token] = verified
        if len(self._verified) > VERIFIED_CACHE_SIZE:
            self._verified.popitem(last=False)
        return verified

    def remembered(self, token: str, *, allow_expired: bool = False) -> VerifiedToken | None:
        """:meth:`verify` of a token verified before and still remembered (a dictionary lookup);
        ``None`` for one not seen or forgotten; ``InvalidToken`` once it has expired."""
        known = self._verified.get(token)
        if known is None or known.expires_at > self._clock() or allow_expired:  # ``exp``: whole seconds
            return known
        del self._verified[token]
        raise InvalidToken("expired")

    def _decode(self, token: str) -> VerifiedToken:
        try:
            decoded = jwt.decode(token, self._key_set, algorithms=[ALGORITHM])
        except (JoseError, ValueError, TypeError) as exc:
            raise InvalidToken(type(exc).__name__) from None
        claims = decoded.claims
        subject, jti, family, expires = (claims.get(name) for name in ("sub", "jti", "fam", "exp"))
        email = claims.get("email")
        groups = claims.get("groups", [])
        if (
            claims.get("iss") != self._issuer
            or not isinstance(subject, str)
            or not isinstance(jti, str)
            or not isinstance(family, str)
            or not isinstance(expires, int)
            or not isinstance(groups, list)
            or not all(isinstance(group, str) for group in groups)
            or not (email is None or isinstance(email, str))
        ):
            raise InvalidToken("claims")
        identity = Identity(subject, email, tuple(groups))
        return VerifiedToken(identity.principal(), jti, family, expires)
