"""Who is calling: the identity the inbound check yields and every policy decision reads.

A static inbound key (``GATEWAY_API_KEYS``, the keys file) is a service account: its subject is
``key:<team>`` and its one group is its team. A bearer minted by the sign-in flow carries the
IdP's subject, e-mail and groups. ``team`` is the label the existing per-team series and session
isolation use: the key's team, or for a signed-in user the e-mail or subject. ``label`` is what
metric series are labelled with, which must stay a bounded set: a key's team (from the keys file),
or ``signed_in`` for every signed-in user (per-user and per-group figures are the fleet series',
with their own bounds).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Final

SIGNED_IN_LABEL: Final = "signed_in"


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
    # the policy's caches are keyed by principal: its hash is found once, not on every lookup
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "_hash", hash((self.subject, self.team, self.groups, self.email, self.source))
        )

    def __hash__(self) -> int:
        return self._hash

    @property
    def label(self) -> str:
        """The bounded ``team`` label of metric series (never a user id)."""
        return SIGNED_IN_LABEL if self.source is Source.TOKEN else self.team

    @classmethod
    def for_key(cls, team: str) -> Principal:
        return cls(subject=f"key:{team}", team=team, groups=(team,), source=Source.KEY)
