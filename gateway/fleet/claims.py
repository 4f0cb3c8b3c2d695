"""From the IdP's ID-token claims to an :class:`~gateway.fleet.tokens.Identity`.

Groups come from ``GATEWAY_OIDC_GROUPS_CLAIM``: a claim name (``groups``), or a dotted path into
nested objects (``realm_access.roles``, optionally written ``$.realm_access.roles``); a claim that
is itself a dotted URL-like name is tried whole first (``https://example.com/groups``). The value
may be a list of strings or one string. An ``email`` the IdP says is not verified
(``email_verified`` false, or the string ``"false"``) is dropped: the user is their subject (anyone
could claim that address). An IdP that omits ``email_verified`` is taken at its word. The e-mail
domain allowlist refuses anyone without a (verified) ``email``, or outside the listed domains.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, Final

from gateway.fleet.tokens import Identity

MAX_GROUPS: Final = 256
MAX_GROUP_CHARS: Final = 256


class Refused(Exception):
    """The IdP said who the user is, but they may not sign in here (the message is user-facing)."""


def claim_at(claims: Mapping[str, Any], path: str) -> Any:
    if path in claims:
        return claims[path]
    node: Any = claims
    for part in path.removeprefix("$.").split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def groups_from(claims: Mapping[str, Any], path: str) -> tuple[str, ...]:
    value = claim_at(claims, path)
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        return ()
    groups = [item[:MAX_GROUP_CHARS] for item in value if isinstance(item, str) and item]
    return tuple(dict.fromkeys(groups))[:MAX_GROUPS]


def _unverified(claims: Mapping[str, Any]) -> bool:
    verified = claims.get("email_verified")  # some IdPs (Cognito) send it as a string
    return verified is False or (isinstance(verified, str) and verified.lower() == "false")


def identity_from(claims: Mapping[str, Any], groups_path: str, email_domains: Collection[str]) -> Identity:
    subject = claims.get("sub")
    if not isinstance(subject, str) or not subject:
        raise Refused("the identity provider did not say who you are (no subject)")
    email = claims.get("email")
    email = email if isinstance(email, str) and "@" in email and not _unverified(claims) else None
    if email_domains:
        domain = email.rsplit("@", 1)[1].lower() if email else None
        if domain is None:
            raise Refused("a verified e-mail address is required to sign in here")
        if domain not in {allowed.lower() for allowed in email_domains}:
            raise Refused(f"e-mail addresses at {domain} may not sign in here")
    return Identity(subject, email, groups_from(claims, groups_path))
