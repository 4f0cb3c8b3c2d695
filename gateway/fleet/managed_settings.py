"""``GET /managed/settings``: the managed settings of the caller's groups, with checksum and ETag.

The checksum must equal the one Claude Code computes over what it loaded (keys sorted by UTF-16
code units, non-ASCII as UTF-8, integral numbers without a fraction); it is also the ETag. Every
answer (200, 304, 404) is in the strict form: ``x-cc-gateway-version`` and ``cache-control:
no-store`` (see :data:`STRICT_HEADERS`).

Details: docs/internals/gateway-fleet.md
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, Final

from aiohttp import web

from gateway import __version__
from gateway.errors import GatewayError
from gateway.fleet.policy import Effective

GATEWAY_VERSION: Final = f"switchyard/{__version__}"
STRICT_HEADERS: Final = {"x-cc-gateway-version": GATEWAY_VERSION, "cache-control": "no-store"}
"""fleet-gateway.md section 2: "A reply with both `x-cc-gateway-version` and `Cache-Control:
no-store` is read strictly (404 = nothing for this session, no warning; 304 = settings that must
not be missing)". Both readings are what our answers mean: a 404 is "no managed settings apply to
you" (the policy names none for the caller: nothing is wrong, so no warning), and a 304 is sent
only to an ``If-None-Match`` naming the current checksum (the client holds settings still in
force, which must not be dropped). ``no-store`` suits a per-user document anyway: the client
caches it by checksum, not through HTTP caches. Claude Code 2.1.332 marks the gateway as seen on
any non-empty ``x-cc-gateway-version`` (the value is opaque to it), and reads the strict form in
its status-only ``If-None-Match: *`` probe over https."""


def _canonical(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {
            key: _canonical(value[key]) for key in sorted(value, key=lambda k: str(k).encode("utf-16-be"))
        }
    if isinstance(value, list | tuple):
        return [_canonical(item) for item in value]
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    return value


def serialise(settings: Mapping[str, Any]) -> bytes:
    """The bytes the checksum is taken over (keys in the order :func:`_canonical` put them)."""
    return json.dumps(_canonical(settings), ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def checksum(settings: Mapping[str, Any]) -> str:
    return "sha256:" + hashlib.sha256(serialise(settings)).hexdigest()


def _tags(header: str) -> list[str]:
    tags = []
    for part in header.split(","):
        tag = part.strip()
        if tag.startswith("W/"):
            tag = tag[2:]
        tags.append(tag)
    return tags


def answer(effective: Effective, if_none_match: str | None) -> web.Response:
    if effective.settings is None:
        raise GatewayError(
            404,
            "no managed settings apply to you on this gateway",
            error_type="not_found_error",
            headers=STRICT_HEADERS,
        )
    digest = checksum(effective.settings)
    etag = f'"{digest}"'
    if if_none_match is not None:
        tags = _tags(if_none_match)
        if "*" not in tags and (etag in tags or digest in tags):
            return web.Response(status=304, headers={"etag": etag, **STRICT_HEADERS})
    body = {"uuid": effective.settings_uuid, "checksum": digest, "settings": effective.settings}
    return web.Response(
        body=json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8"),
        headers={"content-type": "application/json", "etag": etag, **STRICT_HEADERS},
    )
