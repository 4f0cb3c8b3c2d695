"""Microsoft Entra ID as a Foundry emulator serves it: OIDC discovery and client credentials.

Enough of the identity platform for MSAL (and so azure-identity's ``ClientSecretCredential`` with
``authority=<emulator>`` and ``disable_instance_discovery=True``) to get a token for real:

* ``GET /{tenant}/v2.0/.well-known/openid-configuration``: the endpoints, pointing back here;
* ``POST /{tenant}/oauth2/v2.0/token`` with ``grant_type=client_credentials``, ``client_id``,
  ``client_secret`` (one of ``EmulatorConfig.foundry_entra_clients``) and a ``scope`` ending in
  ``/.default``: ``{"token_type":"Bearer","expires_in","ext_expires_in","access_token"}``; the
  token is accepted by the Foundry routes until it expires on the emulator's clock, for the scope
  it was issued for. Errors use the AADSTS wording in the OAuth shape.

MSAL requires an ``https`` authority: serve the Foundry emulator with an ``ssl_context``.
"""

from __future__ import annotations

from typing import Final

import orjson
from aiohttp import web

from .access_tokens import form_text, get_tokens
from .state import get_state

FOUNDRY_SCOPES: Final = frozenset(
    {"https://ai.azure.com/.default", "https://cognitiveservices.azure.com/.default"}
)
"""Audiences a Foundry resource accepts tokens for."""


def _origin(request: web.Request) -> str:
    return str(request.url.origin())


async def handle_openid_configuration(request: web.Request) -> web.Response:
    tenant = request.match_info["tenant"]
    base = f"{_origin(request)}/{tenant}"
    document = {
        "issuer": f"{base}/v2.0",
        "authorization_endpoint": f"{base}/oauth2/v2.0/authorize",
        "token_endpoint": f"{base}/oauth2/v2.0/token",
        "device_authorization_endpoint": f"{base}/oauth2/v2.0/devicecode",
        "end_session_endpoint": f"{base}/oauth2/v2.0/logout",
        "jwks_uri": f"{_origin(request)}/{tenant}/discovery/v2.0/keys",
        "response_types_supported": ["code", "id_token", "code id_token", "id_token token"],
        "token_endpoint_auth_methods_supported": ["client_secret_post", "client_secret_basic"],
        "tenant_region_scope": "EU",
    }
    return web.Response(body=orjson.dumps(document), content_type="application/json")


def _aad_error(status: int, error: str, description: str) -> web.Response:
    body = {
        "error": error,
        "error_description": description,
        "error_codes": [int(description[6 : description.index(":")])],
    }
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json")


async def handle_token(request: web.Request) -> web.Response:
    config = get_state(request.app).config
    form = await request.post()
    if form_text(form, "grant_type") != "client_credentials":
        return _aad_error(
            400,
            "unsupported_grant_type",
            "AADSTS70003: The app requested an unsupported grant type.",
        )
    client_id, secret, scope = (form_text(form, name) for name in ("client_id", "client_secret", "scope"))
    if client_id is None or client_id not in config.foundry_entra_clients:
        return _aad_error(
            400,
            "unauthorized_client",
            f"AADSTS700016: Application with identifier '{client_id}' was not found in the directory.",
        )
    if secret != config.foundry_entra_clients[client_id]:
        return _aad_error(
            401,
            "invalid_client",
            "AADSTS7000215: Invalid client secret provided. Ensure the secret being sent in the request "
            "is the client secret value, not the client secret ID.",
        )
    if scope is None or not scope.endswith("/.default"):
        return _aad_error(
            400,
            "invalid_scope",
            f"AADSTS1002012: The provided value for scope {scope} is not valid. Client credential "
            "flows must have a scope value with /.default suffixed to the resource identifier.",
        )
    lifetime = config.foundry_entra_token_lifetime_s
    issued = get_tokens(request.app).issue("eyJ0eXAi.emu-", client_id, scope, config.clock.time() + lifetime)
    body = {
        "token_type": "Bearer",
        "expires_in": lifetime,
        "ext_expires_in": lifetime,
        "access_token": issued.token,
    }
    return web.Response(body=orjson.dumps(body), content_type="application/json")


def add_entra_routes(app: web.Application) -> None:
    app.router.add_get("/{tenant}/v2.0/.well-known/openid-configuration", handle_openid_configuration)
    app.router.add_post("/{tenant}/oauth2/v2.0/token", handle_token)
