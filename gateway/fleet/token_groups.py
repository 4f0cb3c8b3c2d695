"""Which of a signed-in user's IdP groups an access token carries, and whether it fits a header.

A user in hundreds of IdP groups (Entra ID's GUIDs) would get a token over
``GATEWAY_MAX_HEADER_BYTES``: every call a 431. A token carries only the groups something reads
(``Principal.groups``): those the policy names, ``GATEWAY_TELEMETRY_GROUPS`` (else the first
group, the caller's label), every group with a billing-group tag and no telemetry groups. One
that still would not fit is refused at sign-in (and at refresh), saying so.

Details: docs/internals/gateway-fleet.md
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Final

from gateway.fleet.claims import Refused
from gateway.fleet.refresh_families import RefreshFamilies
from gateway.fleet.tokens import Identity, TokenSigner, VerifiedToken

# what aiohttp counts against the limit besides the token: the header's name and "Bearer "
HEADER_OVERHEAD: Final = len("authorization") + len("Bearer ")


class TokenGroups:
    """The groups to mint: those ``named()`` (the policy in force's, read at each mint) or in
    ``telemetry_groups``, and the first one when ``telemetry_groups`` is empty (its label); every
    group with ``billing_tag`` and no ``telemetry_groups`` (a tag may label a request with any)."""

    def __init__(
        self, named: Callable[[], frozenset[str]], telemetry_groups: tuple[str, ...], billing_tag: bool = False
    ) -> None:
        self._named = named
        self._telemetry = frozenset(telemetry_groups)
        self._every = billing_tag and not telemetry_groups

    def __call__(self, groups: tuple[str, ...]) -> tuple[str, ...]:
        if self._every:
            return groups
        used = self._named() | self._telemetry
        first = not self._telemetry
        return tuple(g for index, g in enumerate(groups) if g in used or (first and index == 0))


def every_group(groups: tuple[str, ...]) -> tuple[str, ...]:
    return groups


class Minter:
    """Mints access tokens with only the groups in use, never one over the header limit."""

    def __init__(self, signer: TokenSigner, groups: Callable[[tuple[str, ...]], tuple[str, ...]]) -> None:
        self.signer = signer
        self.groups = groups
        self.max_header_bytes: int | None = None  # GATEWAY_MAX_HEADER_BYTES (None: no check)

    def mint(self, identity: Identity, family: str) -> tuple[str, VerifiedToken]:
        """The token and what it verifies as; ``Refused`` (user-facing) when it would not fit."""
        kept = replace(identity, groups=self.groups(identity.groups))
        token, verified = self.signer.mint(kept, family)
        limit = self.max_header_bytes
        if limit is not None and HEADER_OVERHEAD + len(token) > limit:
            raise Refused(
                f"your access token would be {HEADER_OVERHEAD + len(token)} bytes with the "
                f"{len(kept.groups)} groups this gateway uses, over its request-header limit of "
                f"{limit} bytes (GATEWAY_MAX_HEADER_BYTES): ask your administrator"
            )
        return token, verified

    def check(self, identity: Identity) -> None:
        """``Refused`` when a token for ``identity`` would not fit (before the user approves)."""
        self.mint(identity, RefreshFamilies.new_id())
