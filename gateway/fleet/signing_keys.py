"""The access-token signing keys: a rotation list from ``GATEWAY_TOKEN_SIGNING_KEYS_FILE`` or one
key generated once and kept in the sign-in store.

The file holds one key per line, ``<kid> <secret>`` (``#`` starts a comment, blank lines skipped):
the first key signs new tokens, every key listed verifies. To rotate, put a new key first, keep the
old one below it for one access-token lifetime, then remove it. A secret is at least 32 characters
(HS256 wants ≥ 256 bits); several replicas share the file (or, without it, the generated key in
Redis).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from gateway.fleet.signin_store import SigninStore
    from gateway.settings.fleet_signin import SigninSettings

MIN_SECRET_CHARS: Final = 32
KEYS: Final = "keys"  # the sign-in store's namespace of the generated signing key and the CSRF key


@dataclass(frozen=True, slots=True)
class SigningKey:
    kid: str
    secret: str

    def __repr__(self) -> str:  # never the secret
        return f"SigningKey(kid={self.kid!r})"


def parse_signing_keys(text: str) -> tuple[SigningKey, ...]:
    """The keys of a keys file, first (the signing key) first; ``ValueError`` naming the line."""
    keys: list[SigningKey] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        kid, _, secret = line.partition(" ")
        secret = secret.strip()
        if not secret:
            raise ValueError(f"line {number}: expected '<kid> <secret>'")
        if len(secret) < MIN_SECRET_CHARS:
            raise ValueError(
                f"line {number}: the secret of {kid!r} is shorter than {MIN_SECRET_CHARS} characters"
            )
        if any(key.kid == kid for key in keys):
            raise ValueError(f"line {number}: key id {kid!r} is listed twice")
        keys.append(SigningKey(kid, secret))
    if not keys:
        raise ValueError("no key in the file")
    return tuple(keys)


def generate_signing_key() -> SigningKey:
    return SigningKey(f"gen-{secrets.token_hex(4)}", secrets.token_urlsafe(48))


async def signing_keys_from(settings: SigninSettings, store: SigninStore) -> tuple[SigningKey, ...]:
    """The keys file's keys, else the one generated key kept in ``store`` (made on first use)."""
    if settings.token_signing_keys_file is not None:  # a small local file, read at start-up
        return parse_signing_keys(settings.token_signing_keys_file.read_text("utf-8"))
    fresh = generate_signing_key()
    stored = await store.put_if_absent(KEYS, "signing", {"kid": fresh.kid, "secret": fresh.secret}, None)
    return (SigningKey(stored["kid"], stored["secret"]),)


def csrf_key_from(signing: SigningKey) -> bytes:
    """The verification page's CSRF key, derived from the first signing key (HMAC-SHA256 under a
    fixed label, so the key itself is never used for two purposes)."""
    return hmac.new(signing.secret.encode(), b"switchyard verification-page csrf v1", hashlib.sha256).digest()
