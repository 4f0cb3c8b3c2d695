"""Google Vertex AI upstream: Claude through ``:rawPredict`` / ``:streamRawPredict``.

Path, headers and body are decided once per request (``frame``); each attempt adds only the
current access token. Betas go in the header, never the body; first-party-only fields never reach
Vertex.

Details: docs/internals/gateway-providers.md
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any, Final

import orjson

from gateway.config import ConfigError, Settings
from gateway.errors import ClientInputError, GatewayError
from gateway.provider_names import ProviderName
from gateway.providers.base import Operation, PreparedRequest, Provider, UpstreamResponse
from gateway.providers.model_discovery import ModelCatalogue
from gateway.providers.model_listing import describe_model_map
from gateway.providers.preparation import Framed, Preparer, Shaped
from gateway.providers.vertex_auth import GoogleCredentials, load_google_credentials
from gateway.providers.vertex_discovery import vertex_fetcher
from gateway.providers.vertex_errors import vertex_error_response
from gateway.transport import HttpUpstreamResponse, Upstream, UpstreamPool
from gateway.upstream_body import read_error_body

log = logging.getLogger("switchyard.upstream_keys")

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


def vertex_headers(client_headers: list[tuple[str, str]], betas: tuple[str, ...]) -> list[tuple[str, str]]:
    """The headers Vertex gets, before the access token."""
    headers = [(name, value) for name, value in client_headers if name.lower() not in _NOT_TO_VERTEX]
    headers.append(("content-type", "application/json"))
    if betas:
        headers.append(("anthropic-beta", ",".join(betas)))
    return headers


def vertex_body(payload: Mapping[str, Any], model: str, *, keep_model: bool) -> bytes:
    """The rawPredict body: ``model`` removed (predict) or set to the Vertex id (count-tokens),
    ``tags`` removed (Vertex rejects it, and Claude Code sends it without the request-tags beta
    behind a gateway whose tokens carry ``billing_group_tag``: providers.md s10), version
    added; the payload itself is not changed."""
    body = {**payload, "model": model} if keep_model else {k: v for k, v in payload.items() if k != "model"}
    body.pop("tags", None)
    body["anthropic_version"] = VERTEX_API_VERSION
    return orjson.dumps(body)


class VertexProvider(Provider):
    name = "vertex"

    def __init__(self, settings: Settings, *, clock: Callable[[], float] = time.time) -> None:
        self._settings = settings
        self._region = settings.vertex.region or ""
        self._base_url = vertex_base_url(self._region, settings.vertex.base_url)
        self._clock = clock
        self._credentials: GoogleCredentials | None = None
        self._project = settings.vertex.project_id or ""
        self._pool = UpstreamPool()
        self._reloads: set[asyncio.Task[bool]] = set()  # SIGHUP re-reads of the credentials file
        self.catalogue: ModelCatalogue | None = (
            ModelCatalogue(
                vertex_fetcher(
                    self._pool.require,
                    self._bearer,
                    self._base_url,
                    settings.models.model_discovery_timeout_s,
                ),
                source="Vertex AI publisher models",
                interval_s=settings.models.model_discovery_interval_s,
                timeout_s=settings.models.model_discovery_timeout_s,
            )
            if settings.models.model_discovery
            else None
        )
        super().__init__(Preparer(settings, ProviderName.VERTEX, self.frame, self.catalogue))

    async def start(self) -> None:
        if not self._region:
            raise ConfigError("CLOUD_ML_REGION: required when the provider is vertex")
        if self._credentials is None:
            self._credentials = await load_google_credentials(self._settings, clock=self._clock)
        self._project = self._settings.vertex.project_id or self._credentials.project_id or ""
        if not self._project:
            raise ConfigError(
                "ANTHROPIC_VERTEX_PROJECT_ID: required: the Google credentials "
                f"({self._credentials.source}) name no project"
            )
        self._pool.open(self._base_url, self._settings.egress)
        if self.catalogue is not None:
            await self.catalogue.start()

    async def close(self) -> None:
        for task in self._reloads:
            task.cancel()
        if self.catalogue is not None:
            await self.catalogue.close()
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
            "model_discovery": self.catalogue.describe() if self.catalogue is not None else "off",
            "model_map": describe_model_map(self._settings.models.model_map),
        }

    async def refresh_credentials(self) -> bool:
        """Vertex rejected the access token (revoked, or expired early): fetch a new one, after
        re-reading GOOGLE_APPLICATION_CREDENTIALS' file (new credentials if it changed)."""
        if self._credentials is None:
            return False
        return await self._credentials.refresh()

    def reload_key_file(self) -> bool | None:
        """``SIGHUP``: re-read GOOGLE_APPLICATION_CREDENTIALS' file in the default executor (its log
        line says what was found) and answer ``False`` at once; ``None`` without a file (ADC)."""
        credentials = self._credentials
        if credentials is None or credentials.key_file is None:
            return None
        task = asyncio.get_running_loop().create_task(credentials.reload_file())
        self._reloads.add(task)
        task.add_done_callback(self._reloaded)
        return False

    def _reloaded(self, task: asyncio.Task[bool]) -> None:
        self._reloads.discard(task)
        if not task.cancelled() and (error := task.exception()) is not None:
            log.warning("Google credentials file not re-read (SIGHUP): %s", type(error).__name__)

    def frame(self, shaped: Shaped) -> Framed:
        model = shaped.upstream_model
        if not model:
            raise ClientInputError(400, "model: Field required")
        if shaped.client.operation is Operation.MESSAGES:
            verb = "streamRawPredict" if shaped.client.stream else "rawPredict"
            path = model_path(self._project, self._region, model, verb)
            body = vertex_body(shaped.payload, model, keep_model=False)
        else:
            path = model_path(self._project, self._region, "count-tokens", "rawPredict")
            body = vertex_body(shaped.payload, model, keep_model=True)
        return Framed(path, body, tuple(vertex_headers(shaped.client.headers, shaped.betas)))

    async def messages(self, request: PreparedRequest) -> UpstreamResponse:
        return await self._post(request)

    async def count_tokens(self, request: PreparedRequest) -> UpstreamResponse:
        return await self._post(request)

    async def _post(self, request: PreparedRequest) -> UpstreamResponse:
        upstream, credentials = self._ready()
        token = await credentials.bearer()
        headers = [*request.headers, ("authorization", f"Bearer {token}")]
        response = await upstream.request(
            "POST", request.path, headers=headers, body=request.body, encoded_path=True
        )
        if 200 <= response.status < 300:
            return HttpUpstreamResponse(response, upstream.body_limits)
        raw = await read_error_body(response, upstream.body_limits, "vertex", request.request_id)
        return vertex_error_response(
            response.status, raw, response.headers.items(), request.request_id, request.model
        )

    async def _bearer(self) -> str:
        if self._credentials is None:
            raise RuntimeError("provider used before start()")
        return await self._credentials.bearer()

    def _ready(self) -> tuple[Upstream, GoogleCredentials]:
        upstream = self._pool.upstream
        if upstream is None or self._credentials is None:
            raise RuntimeError("provider used before start()")
        return upstream, self._credentials
