"""Google service-account key files for the Vertex emulator's token endpoint.

The emulator verifies JWT-bearer assertions with the account's *public* key
(``EmulatorConfig.vertex_service_accounts``: ``client_email`` -> PEM); google-auth signs them with
the private key from the key file and posts them to the file's ``token_uri``. So a usable pair is:
the public key registered before the app is created, and a key file whose ``token_uri`` is the
emulator's ``/token`` (known only once it listens, when it binds port 0).

The key file has the fields of a real one (``type``, ``project_id``, ``private_key_id``,
``private_key``, ``client_email``, ``client_id``, ``token_uri``), as google-auth's
``service_account.Credentials.from_service_account_info`` reads them.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa


@dataclass(frozen=True)
class ServiceAccount:
    email: str
    public_key_pem: str
    info: dict[str, Any]
    """The key file's JSON (it holds the private key: never log it)."""

    def write(self, path: Path, token_uri: str | None = None) -> None:
        """Write the key file (mode 0600), with ``token_uri`` replaced when given."""
        info = dict(self.info)
        if token_uri is not None:
            info["token_uri"] = token_uri
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            json.dump(info, file, indent=2)


def _public_pem(key: rsa.RSAPrivateKey) -> str:
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


def generate(project: str, email: str, token_uri: str) -> ServiceAccount:
    """A new account with a fresh 2048-bit RSA key."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    info = {
        "type": "service_account",
        "project_id": project,
        "private_key_id": "0000000000000000",
        "private_key": private,
        "client_email": email,
        "client_id": "100000000000000000001",
        "token_uri": token_uri,
    }
    return ServiceAccount(email, _public_pem(key), info)


def load(path: Path) -> ServiceAccount:
    """A service-account key file's account; ``ValueError`` saying what is wrong otherwise."""
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a readable JSON key file ({exc.__class__.__name__})") from None
    if not isinstance(info, dict) or info.get("type") != "service_account":
        raise ValueError(f'{path}: not a service-account key file (expected "type": "service_account")')
    email, private = info.get("client_email"), info.get("private_key")
    if not isinstance(email, str) or not isinstance(private, str):
        raise ValueError(f"{path}: client_email or private_key missing")
    try:
        key = serialization.load_pem_private_key(private.encode(), password=None)
    except (ValueError, TypeError):
        raise ValueError(f"{path}: private_key is not an unencrypted PEM key") from None
    if not isinstance(key, rsa.RSAPrivateKey):
        raise ValueError(f"{path}: private_key is not an RSA key (Google signs RS256)")
    return ServiceAccount(email, _public_pem(key), info)
