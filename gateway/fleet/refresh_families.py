"""Refresh tokens: one family per sign-in, rotated on every use, revoked whole on reuse.

A refresh token is ``<family>.<secret>``; the store keeps the family under its id with the SHA-256
of the current secret and of the last ``PREVIOUS_KEPT`` ones. Presenting the current secret rotates
it (compare-and-set, so two concurrent uses cannot both succeed). Presenting a previous one is reuse
(a stolen token, or a client that lost a rotation): the whole family is revoked and its last
access token denied (RFC 9700 §4.14.2). The family also keeps who signed in and the IdP's refresh
token, so a refresh can ask the IdP again (:mod:`gateway.fleet.signin_service`).
"""

from __future__ import annotations

import enum
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from gateway.fleet.device import digest
from gateway.fleet.signin_store import Record, SigninStore

FAMILY: Final = "family"
PREVIOUS_KEPT: Final = 16


class Presented(enum.Enum):
    CURRENT = "current"
    REUSED = "reused"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class FamilyView:
    family: str
    record: Record
    presented: Presented


def split(refresh_token: str) -> tuple[str, str] | None:
    family, dot, secret = refresh_token.partition(".")
    if not dot or not family or not secret or len(refresh_token) > 200:
        return None
    return family, secret


class RefreshFamilies:
    def __init__(self, store: SigninStore, clock: Callable[[], float], ttl_s: int) -> None:
        self._store = store
        self._clock = clock
        self.ttl_s = ttl_s

    @staticmethod
    def new_id() -> str:
        return secrets.token_urlsafe(16)

    async def create(self, family: str, record: Record) -> str:
        """Store family ``family`` holding ``record`` (identity, IdP refresh token, access jti); its
        first refresh token."""
        secret = secrets.token_urlsafe(32)
        stored = {**record, "current": digest(secret), "previous": []}
        await self._store.put(FAMILY, family, stored, self._clock() + self.ttl_s)
        return f"{family}.{secret}"

    async def lookup(self, refresh_token: str) -> FamilyView | None:
        parts = split(refresh_token)
        if parts is None:
            return None
        family, secret = parts
        record = await self._store.get(FAMILY, family)
        if record is None:
            return None
        hashed = digest(secret)
        if secrets.compare_digest(hashed, record["current"]):
            presented = Presented.CURRENT
        elif hashed in record["previous"]:
            presented = Presented.REUSED
        else:
            presented = Presented.UNKNOWN
        return FamilyView(family, record, presented)

    async def rotate(self, view: FamilyView, changes: Record) -> str | None:
        """The family's next token with ``changes`` applied, or ``None`` if it rotated meanwhile."""
        secret = secrets.token_urlsafe(32)
        previous = [view.record["current"], *view.record["previous"]][:PREVIOUS_KEPT]
        updated = {**view.record, **changes, "current": digest(secret), "previous": previous}
        if not await self._store.replace(
            FAMILY, view.family, view.record, updated, self._clock() + self.ttl_s
        ):
            return None
        return f"{view.family}.{secret}"

    async def revoke(self, family: str) -> Record | None:
        """Remove the family; its record (for the last access token's id), if it existed."""
        return await self._store.take(FAMILY, family)
