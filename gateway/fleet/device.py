"""RFC 8628 device authorization grants: issuing codes, polling, approval.

``device_code``: 256 random bits (``secrets.token_urlsafe(32)``), stored only as its SHA-256, single
use (taken atomically when the approved grant is exchanged). ``user_code``: 8 characters of the
RFC 8628 §6.1 base-20 alphabet (consonants without vowels, no ambiguous letters), shown
``WDJB-MJHT``; what the user types is normalised (case, dashes, spaces dropped). A grant expires
after ``EXPIRES_IN_S``; polling faster than ``interval`` answers ``slow_down`` and adds 5 s to the
grant's interval (§3.5), as the client adds 5 s to its own.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from gateway.fleet.signin_store import Record, SigninStore

USER_CODE_ALPHABET: Final = "BCDFGHJKLMNPQRSTVWXZ"  # RFC 8628 §6.1
USER_CODE_LENGTH: Final = 8
EXPIRES_IN_S: Final = 600
INTERVAL_S: Final = 5
SLOW_DOWN_STEP_S: Final = 5
KEEP_AFTER_EXPIRY_S: Final = 600  # a late poll still learns expired_token, not invalid_grant
GRANT: Final = "device"
USER_CODE: Final = "user_code"


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def new_user_code() -> str:
    letters = "".join(secrets.choice(USER_CODE_ALPHABET) for _ in range(USER_CODE_LENGTH))
    return f"{letters[:4]}-{letters[4:]}"


def normalise_user_code(typed: str) -> str | None:
    """The canonical ``XXXX-XXXX`` form of what the user typed, or ``None`` if it cannot be one."""
    letters = "".join(char for char in typed.upper() if char not in "- \t")
    if len(letters) != USER_CODE_LENGTH or any(char not in USER_CODE_ALPHABET for char in letters):
        return None
    return f"{letters[:4]}-{letters[4:]}"


@dataclass(frozen=True, slots=True)
class DeviceAuthorization:
    device_code: str
    user_code: str
    expires_in: int
    interval: int


@dataclass(frozen=True, slots=True)
class PendingGrant:
    """A grant found by its user code (the verification page works on these)."""

    key: str  # the device code's digest
    record: Record

    @property
    def user_code(self) -> str:
        return str(self.record["user_code"])

    @property
    def surface(self) -> str:
        return str(self.record.get("surface") or "")


@dataclass(frozen=True, slots=True)
class PollResult:
    error: str | None  # authorization_pending, slow_down, access_denied, expired_token, invalid_grant
    approval: dict[str, Any] | None = None  # the approved grant's identity and IdP refresh token


class DeviceGrants:
    def __init__(self, store: SigninStore, clock: Callable[[], float]) -> None:
        self._store = store
        self._clock = clock

    async def start(self, surface: str) -> DeviceAuthorization:
        now = self._clock()
        device_code = secrets.token_urlsafe(32)
        key = digest(device_code)
        expires_at = now + EXPIRES_IN_S
        for _ in range(8):  # a user code collision among live grants is rare; draw again
            user_code = new_user_code()
            claimed = await self._store.put_if_absent(USER_CODE, user_code, {"grant": key}, expires_at)
            if claimed.get("grant") == key:
                break
        else:
            raise RuntimeError("could not draw a free user code")
        record: Record = {
            "user_code": user_code,
            "surface": surface[:64],
            "status": "pending",
            "expires_at": expires_at,
            "interval": INTERVAL_S,
            "last_poll": None,
        }
        await self._store.put(GRANT, key, record, expires_at + KEEP_AFTER_EXPIRY_S)
        return DeviceAuthorization(device_code, user_code, EXPIRES_IN_S, INTERVAL_S)

    async def poll(self, device_code: str) -> PollResult:
        key = digest(device_code)
        now = self._clock()
        for _ in range(4):  # a concurrent poll changed the record: read it again
            record = await self._store.get(GRANT, key)
            if record is None:
                return PollResult("invalid_grant")
            if now >= record["expires_at"]:
                await self._store.delete(GRANT, key)
                return PollResult("expired_token")
            last, interval = record["last_poll"], record["interval"]
            if record["status"] == "approved":
                taken = await self._store.take(GRANT, key)  # single use: one poller gets it
                if taken is None or taken.get("status") != "approved":
                    return PollResult("invalid_grant")
                return PollResult(None, taken["approval"])
            if record["status"] == "denied":
                await self._store.delete(GRANT, key)
                return PollResult("access_denied")
            too_fast = last is not None and now - last < interval
            updated = {
                **record,
                "last_poll": now,
                "interval": interval + SLOW_DOWN_STEP_S if too_fast else interval,
            }
            if await self._store.replace(
                GRANT, key, record, updated, record["expires_at"] + KEEP_AFTER_EXPIRY_S
            ):
                return PollResult("slow_down" if too_fast else "authorization_pending")
        return PollResult("slow_down")

    async def find(self, user_code: str) -> PendingGrant | None:
        """The pending, unexpired grant of a (normalised) user code."""
        pointer = await self._store.get(USER_CODE, user_code)
        if pointer is None:
            return None
        key = str(pointer["grant"])
        record = await self._store.get(GRANT, key)
        if record is None or record["status"] != "pending" or self._clock() >= record["expires_at"]:
            return None
        return PendingGrant(key, record)

    async def decide(self, grant: PendingGrant, approval: dict[str, Any] | None) -> bool:
        """Approve (with the identity) or deny (``None``) a pending grant; ``False`` if it changed."""
        current = await self._store.get(GRANT, grant.key)
        if current is None or current["status"] != "pending" or self._clock() >= current["expires_at"]:
            return False
        decided = {
            **current,
            "status": "approved" if approval is not None else "denied",
            "approval": approval,
        }
        done = await self._store.replace(
            GRANT, grant.key, current, decided, current["expires_at"] + KEEP_AFTER_EXPIRY_S
        )
        if done:
            await self._store.delete(USER_CODE, grant.user_code)
        return done
