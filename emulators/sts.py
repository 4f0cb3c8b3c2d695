"""Temporary AWS credentials: an STS ``AssumeRoleWithWebIdentity`` endpoint and a container
credentials endpoint, so botocore's real web-identity (IRSA) and container flows can be pointed at
the emulator.

* STS: ``POST /`` with a form body ``Action=AssumeRoleWithWebIdentity&RoleArn=..&RoleSessionName=..
  &WebIdentityToken=..`` (what botocore sends to ``AWS_ENDPOINT_URL_STS``), answered with STS's XML
  (``AccessKeyId``/``SecretAccessKey``/``SessionToken``/``Expiration``). An unknown token is
  ``400 InvalidIdentityToken``.
* Container: ``GET /container-credentials`` with ``Authorization: <token>`` (botocore sends
  ``AWS_CONTAINER_AUTHORIZATION_TOKEN`` to ``AWS_CONTAINER_CREDENTIALS_FULL_URI``), answered with
  ``{"AccessKeyId","SecretAccessKey","Token","Expiration"}``.

Issued credentials expire after the configured lifetime on the emulator's clock; the SigV4 check
accepts them (with their session token) until then and answers ``ExpiredTokenException`` after.
"""

from __future__ import annotations

import secrets
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final
from xml.sax.saxutils import escape

import orjson
from aiohttp import web

from .clock import Clock

STS_NAMESPACE: Final = "https://sts.amazonaws.com/doc/2011-06-15/"
CONTAINER_CREDENTIALS_PATH: Final = "/container-credentials"
ACCOUNT_ID: Final = "123456789012"


@dataclass(frozen=True, slots=True)
class IssuedCredential:
    access_key_id: str
    secret_access_key: str
    session_token: str
    expires_at: float
    """Emulator clock seconds."""

    @property
    def expiration(self) -> str:
        return datetime.fromtimestamp(self.expires_at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class CredentialIssuer:
    """Issues temporary credentials and remembers them for the SigV4 check. Thread-safe."""

    def __init__(self, clock: Clock, lifetime_s: float) -> None:
        self._clock = clock
        self._lifetime_s = lifetime_s
        self._issued: dict[str, IssuedCredential] = {}
        self._lock = threading.Lock()
        self.sts_calls = 0
        self.container_calls = 0

    def issue(self) -> IssuedCredential:
        credential = IssuedCredential(
            access_key_id="ASIA" + secrets.token_hex(8).upper(),
            secret_access_key=secrets.token_urlsafe(30),
            session_token="IQoJb3JpZ2luX2VtdQ" + secrets.token_urlsafe(48),
            expires_at=self._clock.time() + self._lifetime_s,
        )
        with self._lock:
            self._issued[credential.access_key_id] = credential
        return credential

    def lookup(self, access_key_id: str) -> IssuedCredential | None:
        with self._lock:
            return self._issued.get(access_key_id)

    def issued(self) -> list[IssuedCredential]:
        """Every credential issued so far, oldest first."""
        with self._lock:
            return list(self._issued.values())


def _xml(status: int, body: str) -> web.Response:
    return web.Response(
        status=status,
        body=('<?xml version="1.0" encoding="UTF-8"?>\n' + body).encode(),
        content_type="text/xml",
        headers={"x-amzn-RequestId": secrets.token_hex(16)},
    )


def _sts_error(status: int, code: str, message: str) -> web.Response:
    return _xml(
        status,
        f'<ErrorResponse xmlns="{STS_NAMESPACE}"><Error><Type>Sender</Type><Code>{code}</Code>'
        f"<Message>{escape(message)}</Message></Error><RequestId>{secrets.token_hex(16)}</RequestId>"
        "</ErrorResponse>",
    )


async def handle_sts(request: web.Request, issuer: CredentialIssuer, tokens: frozenset[str]) -> web.Response:
    """``POST /``: the STS Query API, ``AssumeRoleWithWebIdentity`` only."""
    form = {key: value for key, value in (await request.post()).items() if isinstance(value, str)}
    action = form.get("Action", "")
    if action != "AssumeRoleWithWebIdentity":
        return _sts_error(400, "InvalidAction", f"Could not find operation {action} for version 2011-06-15")
    token = form.get("WebIdentityToken")
    role_arn = form.get("RoleArn", "")
    session_name = form.get("RoleSessionName", "session")
    if token is None or token not in tokens:
        return _sts_error(
            400, "InvalidIdentityToken", "Couldn't retrieve verification key from your identity provider"
        )
    issuer.sts_calls += 1
    credential = issuer.issue()
    role = role_arn.rsplit("/", 1)[-1] or "role"
    return _xml(
        200,
        f'<AssumeRoleWithWebIdentityResponse xmlns="{STS_NAMESPACE}"><AssumeRoleWithWebIdentityResult>'
        f"<SubjectFromWebIdentityToken>system:serviceaccount:default:switchyard</SubjectFromWebIdentityToken>"
        f"<Audience>sts.amazonaws.com</Audience>"
        f"<AssumedRoleUser><Arn>arn:aws:sts::{ACCOUNT_ID}:assumed-role/{escape(role)}/{escape(session_name)}</Arn>"
        f"<AssumedRoleId>AROAEMULATOR:{escape(session_name)}</AssumedRoleId></AssumedRoleUser>"
        f"<Credentials><SessionToken>{credential.session_token}</SessionToken>"
        f"<SecretAccessKey>{credential.secret_access_key}</SecretAccessKey>"
        f"<Expiration>{credential.expiration}</Expiration>"
        f"<AccessKeyId>{credential.access_key_id}</AccessKeyId></Credentials>"
        f"<Provider>emulator</Provider></AssumeRoleWithWebIdentityResult>"
        f"<ResponseMetadata><RequestId>{secrets.token_hex(16)}</RequestId></ResponseMetadata>"
        "</AssumeRoleWithWebIdentityResponse>",
    )


def handle_container(request: web.Request, issuer: CredentialIssuer, token: str | None) -> web.Response:
    """``GET /container-credentials``: the ECS/EKS-pod-identity credentials document."""
    if token is not None and request.headers.get("Authorization") != token:
        return web.Response(status=401, body=orjson.dumps({"message": "unauthorized"}))
    issuer.container_calls += 1
    credential = issuer.issue()
    document = {
        "AccessKeyId": credential.access_key_id,
        "SecretAccessKey": credential.secret_access_key,
        "Token": credential.session_token,
        "Expiration": credential.expiration,
    }
    return web.Response(body=orjson.dumps(document), content_type="application/json")
