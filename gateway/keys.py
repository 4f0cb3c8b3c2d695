"""Inbound API keys: parsing, roles, and a constant-time lookup that yields the key's team and role.

Keys are held only as SHA-256 digests. A presented key is hashed (over its bytes, whatever they
are) and looked up by digest, then the digest is compared with ``hmac.compare_digest``: the time taken does not depend on how much of a
secret matches, and the plaintext keys are not kept in memory after they are parsed.

A key has a role: ``client`` (the default) calls the model endpoints and reads its own team's
sessions; ``metrics`` may only read ``/metrics`` (a scraper's key, which can never spend money).
``/metrics`` shows every team's spend, so client keys never read it. ``admin`` keys read and set
spend limits through the fleet admin API and nothing else. ``KeyRing.replace`` swaps the
whole set at once, so the keys file can be reloaded while the gateway serves
(``gateway.key_reload``).
"""

from __future__ import annotations

import enum
import hashlib
import hmac
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

DEFAULT_TEAM = "default"
METRICS_TEAM = "metrics"  # the team of GATEWAY_METRICS_API_KEYS (metrics keys spend nothing)
ROLE_PREFIX = "role="
KEY_FILE_SYNTAX = "'key [team]' with an optional role=client|metrics|admin"


class Role(enum.StrEnum):
    CLIENT = "client"  # model endpoints and the team's own sessions
    METRICS = "metrics"  # /metrics only
    ADMIN = "admin"  # the fleet admin API only (spend limits: gateway.fleet.admin_api)


@dataclass(frozen=True, slots=True)
class InboundKey:
    digest: bytes
    team: str
    role: Role = Role.CLIENT

    def __repr__(self) -> str:  # never show even the digest
        return f"InboundKey(team={self.team!r}, role={self.role.value!r})"


def _digest(key: str) -> bytes:
    """The digest of the key's bytes as sent or configured. aiohttp (like ``os.environ``) hands
    bytes that are not UTF-8 over as lone surrogates: ``surrogateescape`` gives them back, so any
    presented value, valid UTF-8 or not, is hashed and compared as bytes (never an encode error;
    other lone surrogates, which no header or configuration source yields, are kept as such)."""
    try:
        raw = key.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        raw = key.encode("utf-8", "surrogatepass")
    return hashlib.sha256(raw).digest()


def parse_key_list(raw: str, role: Role = Role.CLIENT) -> Iterator[InboundKey]:
    """``GATEWAY_API_KEYS``: comma-separated client keys, all in the default team;
    ``GATEWAY_METRICS_API_KEYS`` (``role=METRICS``): metrics keys, in the team ``metrics``."""
    team = DEFAULT_TEAM if role is Role.CLIENT else METRICS_TEAM
    for item in raw.split(","):
        key = item.strip()
        if key:
            yield InboundKey(_digest(key), team, role)


def parse_key_line(fields: list[str]) -> InboundKey:
    """One key file entry: ``key [team] [role=client|metrics|admin]`` (``role=`` may precede the team).

    Error messages never contain the key itself.
    """
    key, *rest = fields
    roles = [field for field in rest if field.startswith(ROLE_PREFIX)]
    teams = [field for field in rest if not field.startswith(ROLE_PREFIX)]
    if len(roles) > 1 or len(teams) > 1:
        raise ValueError(f"expected {KEY_FILE_SYNTAX}, found {len(fields)} fields")
    role = Role.CLIENT
    if roles:
        name = roles[0].removeprefix(ROLE_PREFIX)
        try:
            role = Role(name)
        except ValueError:
            known = ", ".join(r.value for r in Role)
            raise ValueError(f"unknown role {name!r} (expected one of: {known})") from None
    return InboundKey(_digest(key), teams[0] if teams else DEFAULT_TEAM, role)


def parse_key_text(text: str, source: str) -> Iterator[InboundKey]:
    """The content of a keys file; ``source`` names it in error messages (``path:line: ...``)."""
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        try:
            yield parse_key_line(stripped.split())
        except ValueError as exc:
            raise ValueError(f"{source}:{number}: {exc}") from None


def parse_key_file(path: Path) -> Iterator[InboundKey]:
    """``GATEWAY_API_KEYS_FILE``: one key per line, optionally followed by a team name and a role.

    Blank lines and lines starting with ``#`` are ignored.
    """
    return parse_key_text(path.read_text(encoding="utf-8"), str(path))


class KeyRing:
    """The inbound keys in force; ``lookup`` returns the matching key or ``None`` when unknown."""

    def __init__(self, keys: Iterable[InboundKey]) -> None:
        self._by_digest: dict[bytes, InboundKey] = {}
        self.teams: frozenset[str] = frozenset()
        self.has_metrics_keys = False
        self.replace(keys)

    def replace(self, keys: Iterable[InboundKey]) -> None:
        """Put a new key set in force (one assignment: a concurrent lookup sees old or new)."""
        by_digest = {key.digest: key for key in keys}
        self.teams = frozenset(k.team for k in by_digest.values() if k.role is Role.CLIENT)
        self.has_metrics_keys = any(k.role is Role.METRICS for k in by_digest.values())
        self._by_digest = by_digest

    def __len__(self) -> int:
        return len(self._by_digest)

    def entries(self) -> tuple[InboundKey, ...]:
        return tuple(self._by_digest.values())

    def lookup(self, presented: str) -> InboundKey | None:
        digest = _digest(presented)
        found = self._by_digest.get(digest)
        if found is None or not hmac.compare_digest(found.digest, digest):
            return None
        return found

    def team_for(self, presented: str) -> str | None:
        found = self.lookup(presented)
        return None if found is None else found.team
