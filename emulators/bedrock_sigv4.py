"""Checking a request's credentials the way Bedrock does: SigV4 (verified with botocore) or a
Bedrock API key (``Authorization: Bearer``).

SigV4 steps (all failures are 403, with AWS's exception names):

1. Parse ``AWS4-HMAC-SHA256 Credential=AKID/date/region/service/aws4_request, SignedHeaders=...,
   Signature=...`` (else ``IncompleteSignatureException``; no header at all:
   ``MissingAuthenticationTokenException``).
2. Look the key up: a long-term fixture key, or one issued by the emulator's STS / container
   endpoint (those need their ``X-Amz-Security-Token`` and expire on the emulator's clock:
   ``ExpiredTokenException``). Unknown: ``UnrecognizedClientException``.
3. Scope service must be ``bedrock`` and the region the configured one; ``X-Amz-Date`` must match
   the scope date (and the clock, within ``max_clock_skew_s`` when set).
4. Rebuild the request from the **raw** path (botocore re-quotes it, giving the canonical
   ``%3A``/``%252F`` forms the signer also used), exactly the signed headers and the body; sign it
   with ``SigV4Auth`` at the request's own timestamp and compare with ``hmac.compare_digest``.
   Mismatch (wrong secret, tampered body or header): ``InvalidSignatureException``.
"""

from __future__ import annotations

import hmac
import re
from calendar import timegm
from time import strptime
from typing import Any, Final

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest, HTTPHeaders
from botocore.credentials import Credentials
from multidict import CIMultiDictProxy

from .bedrock_config import BedrockOptions
from .bedrock_exceptions import BedrockError
from .sts import CredentialIssuer

SERVICE: Final = "bedrock"
_AUTHORIZATION = re.compile(
    r"^AWS4-HMAC-SHA256\s+Credential=([^/,\s]+)/(\d{8})/([^/,\s]+)/([^/,\s]+)/aws4_request\s*,\s*"
    r"SignedHeaders=([a-z0-9;\-]+)\s*,\s*Signature=([0-9a-f]{64})\s*$"
)


class _SignedHeadersOnly(SigV4Auth):  # type: ignore[misc]  # botocore is untyped
    """A SigV4 signer that signs exactly the headers the client listed in ``SignedHeaders``."""

    def __init__(self, credentials: Any, region: str, signed: list[str]) -> None:
        super().__init__(credentials, SERVICE, region)
        self._signed = signed

    def headers_to_sign(self, request: Any) -> Any:
        headers = HTTPHeaders()
        for name in self._signed:
            for value in request.headers.get_all(name) or []:
                headers[name] = value
        return headers


def _denied(code: str, message: str | None = None) -> BedrockError:
    return BedrockError(code, message)


def authenticate(
    *,
    method: str,
    raw_path: str,
    headers: CIMultiDictProxy[str],
    body: bytes,
    options: BedrockOptions,
    issuer: CredentialIssuer,
    now: float,
) -> str:
    """The caller's access key id (or ``"bearer"``); raises ``BedrockError`` when not allowed."""
    authorization = headers.get("Authorization", "").strip()
    if not authorization:
        raise _denied("MissingAuthenticationTokenException")
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() == "bearer":
        if token.strip() in options.api_keys:
            return "bearer"
        raise _denied("UnrecognizedClientException")
    match = _AUTHORIZATION.match(authorization)
    if match is None:
        raise _denied(
            "IncompleteSignatureException",
            "Authorization header requires existence of "
            "Credential, SignedHeaders and Signature, each in the form key=value.",
        )
    access_key, scope_date, region, service, signed_list, signature = match.groups()
    session_token = headers.get("X-Amz-Security-Token")
    secret = options.credentials.get(access_key)
    if secret is None:
        issued = issuer.lookup(access_key)
        if issued is None or session_token != issued.session_token:
            raise _denied("UnrecognizedClientException")
        if now >= issued.expires_at:
            raise _denied("ExpiredTokenException")
        secret = issued.secret_access_key
    if service != SERVICE:
        raise _denied(
            "InvalidSignatureException", f"Credential should be scoped to correct service: '{SERVICE}'."
        )
    if region != options.region:
        raise _denied(
            "InvalidSignatureException", f"Credential should be scoped to a valid region, not '{region}'."
        )
    amz_date = headers.get("X-Amz-Date", "")
    if not amz_date.startswith(scope_date) or len(amz_date) != 16:
        raise _denied(
            "InvalidSignatureException",
            "Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date from HTTP.",
        )
    if options.max_clock_skew_s is not None:
        signed_at = timegm(strptime(amz_date, "%Y%m%dT%H%M%SZ"))
        if abs(now - signed_at) > options.max_clock_skew_s:
            raise _denied("InvalidSignatureException", "Signature expired: the request time is too skewed.")
    signed = signed_list.split(";")
    if "host" not in signed:
        raise _denied(
            "InvalidSignatureException", "'Host' must be a 'SignedHeader' in the AWS Authorization."
        )
    rebuilt = AWSRequest(method=method, url=f"http://{headers.get('Host', '')}{raw_path}", data=body)
    for name in signed:
        for value in headers.getall(name, []):
            rebuilt.headers[name] = value
    rebuilt.context["timestamp"] = amz_date
    signer = _SignedHeadersOnly(Credentials(access_key, secret, session_token), region, signed)
    expected = signer.signature(signer.string_to_sign(rebuilt, signer.canonical_request(rebuilt)), rebuilt)
    if not hmac.compare_digest(expected, signature):
        raise _denied("InvalidSignatureException")
    return access_key
