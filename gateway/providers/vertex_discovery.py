"""Reading Vertex AI's Anthropic model list: Model Garden publisher models.

Uses the ``v1beta1`` list method through the provider's pooled session; ids are checked by model
name (before ``@``). Project enablement and region are not verified by this list.

Details: docs/internals/gateway-providers.md
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

import aiohttp

from gateway.errors import GatewayError
from gateway.providers.model_discovery import DiscoveryError, Fetch
from gateway.transport import Upstream

PREFIX: Final = "publishers/anthropic/models/"
PAGE_SIZE: Final = 100
MAX_PAGES: Final = 20
_DATE: Final = re.compile(r"^20\d{6}$")


def publisher_models_url(vertex_base: str) -> str:
    """The ``v1beta1`` list URL for a Vertex API root given with (or without) ``/v1``."""
    root = vertex_base.rstrip("/").removesuffix("/v1")
    return f"{root}/v1beta1/publishers/anthropic/models"


def publisher_model_ids(page: Mapping[str, Any]) -> set[str]:
    """The served Vertex ids of one ``ListPublisherModels`` page."""
    ids: set[str] = set()
    models = page.get("publisherModels")
    for item in models if isinstance(models, list) else []:
        if not isinstance(item, dict):
            continue
        name = item.get("name")
        if not isinstance(name, str) or not name.startswith(PREFIX):
            continue
        model = name.removeprefix(PREFIX)
        if not model or "/" in model:
            continue
        ids.add(model)
        version = item.get("versionId")
        if "@" not in model and isinstance(version, str) and _DATE.match(version):
            ids.add(f"{model}@{version}")
    return ids


def vertex_fetcher(
    upstream: Callable[[], Upstream], token: Callable[[], Awaitable[str]], vertex_base: str, timeout_s: float
) -> Fetch:
    """A :data:`~gateway.providers.model_discovery.Fetch` reading the publisher-model list."""
    url = publisher_models_url(vertex_base)

    async def fetch() -> frozenset[str]:
        try:
            bearer = await token()
        except GatewayError as exc:
            raise DiscoveryError(f"Google credentials unavailable: {exc.message}") from None
        connection = upstream()
        ids: set[str] = set()
        page_token: str | None = None
        for _ in range(MAX_PAGES):
            params = {"pageSize": str(PAGE_SIZE)}
            if page_token:
                params["pageToken"] = page_token
            page = await _get(connection, url, params, bearer, timeout_s)
            ids |= publisher_model_ids(page)
            next_token = page.get("nextPageToken")
            page_token = next_token if isinstance(next_token, str) and next_token else None
            if page_token is None:
                break
        return frozenset(ids)

    return fetch


async def _get(
    connection: Upstream, url: str, params: dict[str, str], bearer: str, timeout_s: float
) -> Mapping[str, Any]:
    try:
        async with connection.session.get(
            url,
            params=params,
            headers={"authorization": f"Bearer {bearer}", "accept": "application/json"},
            proxy=connection.proxy,
            timeout=aiohttp.ClientTimeout(total=timeout_s),
            allow_redirects=False,
        ) as response:
            if response.status != 200:
                raise DiscoveryError(f"ListPublisherModels: HTTP {response.status}")
            page = await response.json(content_type=None)
    except (aiohttp.ClientError, OSError, ValueError) as exc:
        raise DiscoveryError(f"ListPublisherModels: {type(exc).__name__}") from None
    if not isinstance(page, dict):
        raise DiscoveryError("ListPublisherModels: not a JSON object")
    return page
