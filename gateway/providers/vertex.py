"""Google Vertex AI upstream: Claude through ``:rawPredict`` / ``:streamRawPredict``.

* URL: ``{base}/projects/{project}/locations/{region}/publishers/anthropic/models/{model}:{verb}``
  with ``{base}`` = ``https://{region}-aiplatform.googleapis.com/v1`` (``global`` ->
  ``aiplatform.googleapis.com``, ``us`` / ``eu`` -> the multi-region ``aiplatform.{us,eu}.rep``
  hosts), or ``ANTHROPIC_VERTEX_BASE_URL`` (which includes ``/v1``, like the SDK's). The verb is
  ``streamRawPredict`` for ``"stream": true``, else ``rawPredict``. The model is the Vertex id
  (``claude-sonnet-4-5@20250929``) from :func:`~gateway.providers.preparation.prepare`,
  percent-encoded with ``@`` kept (``;`` -> ``%3B``), as the SDK does.
* Body: the client's, minus ``model`` (it is in the path), plus ``anthropic_version:
  "vertex-2023-10-16"`` (the documented value); ``stream`` stays. count_tokens goes to
  ``.../models/count-tokens:rawPredict`` and keeps ``model`` (the Vertex id) in the body.
* Headers: the client's forwardable ones without ``anthropic-version`` (Vertex takes the version in
  the body); the betas the policy kept go in ``anthropic-beta`` (never in the body); the
  credential is Google's OAuth access token (:mod:`.vertex_auth`); no ``x-client-request-id``.
* Betas Vertex does not accept are dropped with their body halves by the shared policy, so the
  request tags (``tags`` and ``request-tags-2026-08-21``) never reach Vertex.
* Responses: success bytes (JSON or Anthropic SSE) are relayed as they are; errors are translated
  by :mod:`.vertex_errors`. ``GET /v1/models`` is answered locally from the model map.
"""

from __future__ import annotations

import contextlib
import time
import urllib.parse
from collections.abc import Callable
from typing import Any, Final

import aiohttp
import orjson

from gateway.config import ConfigError, ProviderName, Settings
from gateway.errors import GatewayError, UpstreamUnavailable
from gateway.providers.base import BufferedResponse, ClientRequest, Provider, UpstreamResponse
from gateway.providers.betas import BetaPolicy
from gateway.providers.preparation import PreparedRequest, prepare, resolver_for
from gateway.providers.vertex_auth import GoogleCredentials, load_google_credentials
from gateway.providers.vertex_errors import vertex_error_response
from gateway.transport import HttpUpstreamResponse, Upstream, UpstreamPool

VERTEX_API_VERSION: Final = "vertex-2023-10-16"
_NOT_TO_VERTEX: Final = frozenset({"anthropic-version", "anthropic-beta", "content-type"})
_MULTI_REGION_HOSTS: Final = {
    "global": "https://aiplatform.googleapis.com",
    "us": "https://aiplatform.us.rep.googleapis.com",
    "eu": "https://aiplatform.eu.rep.googleapis.com",
}


def vertex_base_url(region: str, override: str | None = None) -> str:
    """The API root including ``/v1``: ``ANTHROPIC_VERTEX_BASE_URL``, else the region's host."""
    if override:
        return override.rstrip("/")
    host = _MULTI_REGION_HOSTS.get(region, f"https://{region}-aiplatform.googleapis.com")
    return f"{host}/v1"


def model_path(project: str, region: str, model: str, verb: str) -> str:
    """``/projects/.../models/{model}:{verb}`` (percent-encoded; ``@`` kept, ``;`` as ``%3B``)."""
    return (
        f"/projects/{urllib.parse.quote(project, safe='')}"
        f"/locations/{urllib.parse.quote(region, safe='')}"
        f"/publishers/anthropic/models/{urllib.parse.quote(model, safe='@')}:{verb}"
    )


def vertex_headers(
    client_headers: list[tuple[str, str]], betas: list[str], token: str
) -> list[tuple[str, str]]:
    headers = [(name, value) for name, value in client_headers if name.lower() not in _NOT_TO_VERTEX]
    headers.append(("content-type", "application/json"))
    if betas:
        headers.append(("anthropic-beta", ",".join(betas)))
    headers.append(("authorization", f"Bearer {token}"))
    return headers


def vertex_body(prepared: PreparedRequest, *, keep_model: bool) -> bytes:
    """The rawPredict body: ``model`` removed (predict) or kept (count-tokens), version added."""
    payload: dict[str, Any] = prepared.payload
    if keep_model:
        payload["model"] = prepared.model
    else:
        payload.pop("model", None)
    payload["anthropic_version"] = VERTEX_API_VERSION
    return orjson.dumps(payload)


class VertexProvider(Provider):
    name = "vertex"

    def __init__(self, settings: Settings, *, clock: Callable[[], float] = time.time) -> None:
        self._settings = settings
        self._region = settings.vertex_region or ""
        self._base_url = vertex_base_url(self._region, settings.vertex_base_url)
        self._resolver = resolver_for(settings)
        self._policy = BetaPolicy.from_settings(settings.beta_policy)
        self._clock = clock
        self._credentials: GoogleCredentials | None = None
        self._project = settings.vertex_project_id or ""
        self._pool = UpstreamPool()

    async def start(self) -> None:
        if not self._region:
            raise ConfigError("CLOUD_ML_REGION: required when the provider is vertex")
        if self._credentials is None:
            self._credentials = await load_google_credentials(self._settings, clock=self._clock)
        self._project = self._settings.vertex_project_id or self._credentials.project_id or ""
        if not self._project:
            raise ConfigError(
                "ANTHROPIC_VERTEX_PROJECT_ID: required: the Google credentials "
                f"({self._credentials.source}) name no project"
            )
        self._pool.open(self._base_url, self._settings)

    async def close(self) -> None:
        await self._pool.close()
        if self._credentials is not None:
            self._credentials.close()

    def not_ready_reason(self) -> str | None:
        if self._credentials is None or not self._project:
            return "Vertex AI provider not started (no Google credentials or project yet)"
        health = self._credentials.tokens.health
        return health.not_ready_reason() if health is not None else None

    async def readiness(self) -> str | None:
        """Retry a failing token fetch when due (see :mod:`.credentials_health`), then report."""
        credentials = self._credentials
        health = credentials.tokens.health if credentials is not None else None
        if credentials is not None and health is not None and health.recheck_due():
            with contextlib.suppress(GatewayError):
                await credentials.bearer()
        return self.not_ready_reason()

    def describe(self) -> dict[str, str]:
        return {
            "provider": self.name,
            "base_url": self._base_url,
            "project": self._project,
            "region": self._region,
            "credential_source": self._credentials.source if self._credentials else "not loaded",
            "proxy": self._pool.proxy_label,
        }

    async def refresh_credentials(self) -> bool:
        """Vertex rejected the access token (revoked, or expired early): fetch a new one."""
        if self._credentials is None:
            return False
        return await self._credentials.refresh()

    async def messages(self, request: ClientRequest) -> UpstreamResponse:
        prepared = prepare(request, ProviderName.VERTEX, self._resolver, self._policy)
        if not prepared.model:
            raise GatewayError(400, "model: Field required")
        verb = "streamRawPredict" if request.stream else "rawPredict"
        path = model_path(self._project, self._region, prepared.model, verb)
        return await self._post(path, vertex_body(prepared, keep_model=False), request, prepared)

    async def count_tokens(self, request: ClientRequest) -> UpstreamResponse:
        prepared = prepare(request, ProviderName.VERTEX, self._resolver, self._policy)
        if not prepared.model:
            raise GatewayError(400, "model: Field required")
        path = model_path(self._project, self._region, "count-tokens", "rawPredict")
        return await self._post(path, vertex_body(prepared, keep_model=True), request, prepared)

    async def list_models(self, headers: list[tuple[str, str]], query: str) -> UpstreamResponse:
        data = self._resolver.served()
        payload = {
            "data": data,
            "has_more": False,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
        }
        return BufferedResponse(200, orjson.dumps(payload), [("content-type", "application/json")])

    async def _post(
        self, path: str, body: bytes, request: ClientRequest, prepared: PreparedRequest
    ) -> UpstreamResponse:
        upstream, credentials = self._ready()
        token = await credentials.bearer()
        headers = vertex_headers(request.headers, prepared.betas, token)
        response = await upstream.request("POST", path, headers=headers, body=body, encoded_path=True)
        result: UpstreamResponse
        if 200 <= response.status < 300:
            result = HttpUpstreamResponse(response)
        else:
            try:
                raw = await response.read()
            except (aiohttp.ClientError, OSError) as exc:
                raise UpstreamUnavailable(f"upstream error body lost: {type(exc).__name__}") from None
            finally:
                response.release()
            result = vertex_error_response(response.status, raw, response.headers.items(), request.request_id)
        result.dropped_betas = tuple(prepared.dropped_betas)
        return result

    def _ready(self) -> tuple[Upstream, GoogleCredentials]:
        upstream = self._pool.upstream
        if upstream is None or self._credentials is None:
            raise RuntimeError("provider used before start()")
        return upstream, self._credentials
