"""The Google credentials file (``GOOGLE_APPLICATION_CREDENTIALS``, per upstream in
``GATEWAY_UPSTREAMS_FILE``) re-read when Google refuses its key or on ``SIGHUP``.

google-auth keeps a service account's private key in memory: a new key written over the file is
used once the file is read again, and :class:`GoogleKeyFile` then builds new credentials from it.
An unreadable or invalid file keeps the credentials in use, with one warning naming the variable
and path (never the content). Everything here blocks: it runs in the default executor (the token
fetch, a ``SIGHUP`` job), never on the event loop. Credentials found without a file (metadata
server, gcloud's user credentials) have nothing to re-read.

Details: docs/internals/gateway-providers.md
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

log = logging.getLogger("switchyard.upstream_keys")

CLOUD_PLATFORM_SCOPE: Final = "https://www.googleapis.com/auth/cloud-platform"
VARIABLE: Final = "GOOGLE_APPLICATION_CREDENTIALS"
REFUSED: Final = "refused by Google"
SIGHUP: Final = "SIGHUP"
# the credential types google.auth.load_credentials_from_dict builds (google/auth/_default.py)
_TYPES: Final = frozenset(
    {
        "service_account",
        "authorized_user",
        "external_account",
        "external_account_authorized_user",
        "impersonated_service_account",
        "gdch_service_account",
    }
)


class UnusableFile(ValueError):
    """Why a credentials file cannot be used; the message never holds the file's content."""


@dataclass(frozen=True, slots=True)
class LoadedFile:
    credentials: Any  # google.auth.credentials.Credentials
    project_id: str | None
    digest: bytes  # SHA-256 of the file's bytes


def load_file(path: Path) -> LoadedFile:
    """Blocking: read ``path`` once and build scoped google-auth credentials from it."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise UnusableFile(f"cannot read it ({type(exc).__name__})") from None
    try:
        info = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise UnusableFile("not a JSON credentials file") from None
    if not isinstance(info, dict):
        raise UnusableFile("not a JSON credentials file")
    if info.get("type") not in _TYPES:
        raise UnusableFile('no "type" google-auth knows (e.g. "service_account")')
    if info["type"] == "service_account":
        missing = [name for name in ("client_email", "private_key", "token_uri") if not info.get(name)]
        if missing:
            raise UnusableFile(f"a service-account key without {', '.join(missing)}")
    import google.auth
    from google.auth import exceptions

    try:
        # the operator's own file, loaded as google.auth.default() loads the same variable (which
        # also silences the warning about credential files from untrusted sources)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            credentials, project = google.auth.load_credentials_from_dict(  # type: ignore[no-untyped-call]
                info, scopes=[CLOUD_PLATFORM_SCOPE]
            )
    except (exceptions.GoogleAuthError, ValueError, TypeError) as exc:  # messages may quote the file
        raise UnusableFile(f"google-auth cannot load it ({type(exc).__name__})") from None
    return LoadedFile(credentials, project or None, hashlib.sha256(raw).digest())


class GoogleKeyFile:
    """The credentials in use for one Vertex upstream, first those loaded at start-up."""

    def __init__(self, path: Path, loaded: LoadedFile, variable: str = VARIABLE) -> None:
        self.path = path
        self.variable = variable
        self.credentials: Any = loaded.credentials
        self.generation = 0  # how many times new credentials were put in use
        self._digest = loaded.digest
        self._failure: str | None = None  # the problem last logged (once until a good read)
        self._lock = threading.Lock()  # a SIGHUP job and a token fetch may read at once

    def reload(self, trigger: str) -> bool:
        """Blocking: read the file; put credentials built from it in use if its content changed
        (``True`` then). Logs a new file, a problem (once per cause), an unchanged file on SIGHUP."""
        with self._lock:
            try:
                loaded = load_file(self.path)
            except UnusableFile as exc:
                if str(exc) != self._failure:
                    self._failure = str(exc)
                    log.warning(
                        "Google credentials file %s (%s) not re-read (%s): %s; keeping the credentials in use",
                        self.path,
                        self.variable,
                        trigger,
                        exc,
                    )
                return False
            self._failure = None
            if loaded.digest == self._digest:
                if trigger == SIGHUP:
                    log.info(
                        "Google credentials file %s (%s) unchanged (%s)", self.path, self.variable, trigger
                    )
                return False
            self.credentials, self._digest = loaded.credentials, loaded.digest
            self.generation += 1
        account = getattr(loaded.credentials, "service_account_email", None)
        named = f" for {account}" if isinstance(account, str) and account else ""
        log.info(
            "Google credentials re-read from %s (%s, %s): new credentials%s in use",
            self.path,
            self.variable,
            trigger,
            named,
        )
        return True
