"""Who is calling: the identity the inbound check yields and every policy decision reads.

A static inbound key (``GATEWAY_API_KEYS``, the keys file) is a service account: its subject is
``key:<team>`` and its one group is its team. A bearer minted by the sign-in flow carries the
IdP's subject, e-mail and groups. ``team`` is the label the existing per-team series and session
isolation use: the key's team, or for a signed-in user the subject.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Source(enum.StrEnum):
    KEY = "key"  # a static inbound key (service accounts, CI)
    TOKEN = "token"  # an access token minted by the sign-in flow
    OPEN = "open"  # an open gateway (no key configured, unauthenticated access allowed)


@dataclass(frozen=True, slots=True)
class Principal:
    subject: str
    team: str
    groups: tuple[str, ...] = ()
    email: str | None = None
    source: Source = Source.KEY

    @classmethod
    def for_key(cls, team: str) -> Principal:
        return cls(subject=f"key:{team}", team=team, groups=(team,), source=Source.KEY)
