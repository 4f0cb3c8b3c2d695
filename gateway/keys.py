"""Inbound API keys: parsing, and a constant-time lookup that yields the key's team.

Keys are held only as SHA-256 digests. A presented key is hashed and looked up by digest, then the
digest is compared with ``hmac.compare_digest``: the time taken does not depend on how much of a
secret matches, and the plaintext keys are not kept in memory after start-up.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

DEFAULT_TEAM = "default"


@dataclass(frozen=True, slots=True)
class InboundKey:
    digest: bytes
    team: str

    def __repr__(self) -> str:  # never show even the digest
        return f"InboundKey(team={self.team!r})"


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


def parse_key_list(raw: str) -> Iterator[InboundKey]:
    """``GATEWAY_API_KEYS``: comma-separated keys, all in the default team."""
    for item in raw.split(","):
        key = item.strip()
        if key:
            yield InboundKey(_digest(key), DEFAULT_TEAM)


def parse_key_file(path: Path) -> Iterator[InboundKey]:
    """``GATEWAY_API_KEYS_FILE``: one key per line, optionally followed by a team name.

    Blank lines and lines starting with ``#`` are ignored.
    """
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        fields = text.split()
        if len(fields) > 2:
            raise ValueError(f"{path}:{number}: expected 'key [team]', found {len(fields)} fields")
        team = fields[1] if len(fields) == 2 else DEFAULT_TEAM
        yield InboundKey(_digest(fields[0]), team)


class KeyRing:
    """The configured inbound keys; ``team_for`` returns the team or ``None`` when unknown."""

    def __init__(self, keys: Iterable[InboundKey]) -> None:
        self._by_digest = {key.digest: key for key in keys}

    def __len__(self) -> int:
        return len(self._by_digest)

    def team_for(self, presented: str) -> str | None:
        digest = _digest(presented)
        found = self._by_digest.get(digest)
        if found is None or not hmac.compare_digest(found.digest, digest):
            return None
        return found.team
