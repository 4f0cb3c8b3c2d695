"""OAuth for streamable HTTP MCP servers, machine to machine: the client-credentials grant.

A headless agent has nobody to send through a browser, so switchyard supports the grant a service
account uses: ``"oauth": {"clientId": "...", "clientSecret": "${MCP_SECRET}", "issuer":
"https://auth.example.com", "scope": "tools:read"}`` in an HTTP server's entry (``clientId`` and
``clientSecret`` take ``${VAR}`` references like the other fields). The ``mcp`` package's
``ClientCredentialsOAuthProvider`` does the protocol: the server's 401 names its protected-resource
metadata (RFC 9728), that names the authorization server, whose metadata (RFC 8414) gives the
token endpoint; the token (client_secret_basic by default, or client_secret_post) is kept in
memory for the connection and sent as a bearer token. ``issuer`` is required: the credentials
are only ever sent to that authorization server (the package refuses any other). Claude Code's
browser flow (authorization code with PKCE, ``callbackPort``) is not implemented.
"""

from __future__ import annotations

from typing import Literal

import httpx2
from mcp.client.auth import TokenStorage
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from pydantic import BaseModel, ConfigDict, Field


class OAuthSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    client_id: str = Field(min_length=1, alias="clientId")
    client_secret: str = Field(min_length=1, alias="clientSecret", repr=False)
    issuer: str = Field(pattern=r"^https?://")
    scope: str | None = None
    token_auth_method: Literal["client_secret_basic", "client_secret_post"] = Field(
        "client_secret_basic", alias="tokenEndpointAuthMethod"
    )


class MemoryTokens(TokenStorage):
    """The connection's token and client information, in memory only (never written anywhere)."""

    def __init__(self) -> None:
        self._tokens: OAuthToken | None = None
        self._client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self._tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self._tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self._client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self._client = client_info


def client_credentials(url: str, settings: OAuthSettings) -> httpx2.Auth:
    """The ``httpx2`` auth of a connection to the MCP server at ``url``."""
    return ClientCredentialsOAuthProvider(
        server_url=url,
        storage=MemoryTokens(),
        client_id=settings.client_id,
        client_secret=settings.client_secret,
        token_endpoint_auth_method=settings.token_auth_method,
        scope=settings.scope,
        issuer=settings.issuer,
    )
