"""``GET /v1/models`` for upstreams the gateway answers locally: what this deployment serves.

An id is listed only if the gateway would serve it (resolution round-trips to a listed id).

Details: docs/internals/gateway-providers.md
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from gateway.provider_names import ProviderName
from gateway.providers import model_patterns
from gateway.providers.model_discovery import ServedModels
from gateway.providers.models import (
    FIRST_PARTY_MODELS,
    UNKNOWN_RELEASE,
    ModelResolver,
    UnknownModel,
    catalogue_entry,
)


def model_info(model_id: str, display_name: str, created_at: str) -> dict[str, str]:
    return {"type": "model", "id": model_id, "display_name": display_name, "created_at": created_at}


def served_models(resolver: ModelResolver) -> list[dict[str, str]]:
    """The ``data`` of ``GET /v1/models`` for this resolver's upstream."""
    served = resolver.catalogue.current if resolver.catalogue is not None else None
    if served is not None and resolver.provider in (ProviderName.BEDROCK, ProviderName.VERTEX):
        out = _discovered(resolver, served)
    else:
        out = _from_table(resolver.provider)
    seen = {item["id"] for item in out}
    for name in resolver.overrides:
        if name not in seen:
            seen.add(name)
            known = catalogue_entry(name)
            if known is not None:
                out.append(model_info(name, known.display_name, known.created_at))
            else:
                out.append(model_info(name, model_patterns.display_name(name), UNKNOWN_RELEASE))
    return out


def models_page(resolver: ModelResolver) -> dict[str, Any]:
    """The whole ``GET /v1/models`` body (one page)."""
    data = served_models(resolver)
    return {
        "data": data,
        "has_more": False,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
    }


class ModelListing:
    """``GET /v1/models`` of one provider, serialised once per catalogue read (the same bytes until
    model discovery replaces the catalogue)."""

    def __init__(self, resolver: ModelResolver) -> None:
        self._resolver = resolver
        self._page: bytes | None = None
        self._served: ServedModels | None = None

    def page(self) -> bytes:
        catalogue = self._resolver.catalogue
        served = catalogue.current if catalogue is not None else None
        if self._page is None or served is not self._served:
            self._page = orjson.dumps(models_page(self._resolver))
            self._served = served
        return self._page


def _from_table(provider: ProviderName) -> list[dict[str, str]]:
    out = []
    for entry in FIRST_PARTY_MODELS:
        native = {ProviderName.BEDROCK: entry.bedrock, ProviderName.VERTEX: entry.vertex}.get(
            provider, entry.alias
        )
        if native is not None:
            out.append(model_info(entry.alias, entry.display_name, entry.created_at))
    return out


def _discovered(resolver: ModelResolver, served: ServedModels) -> list[dict[str, str]]:
    natives: Iterable[str] = served.ids
    if resolver.provider is ProviderName.BEDROCK:
        reverse = model_patterns.client_id_from_bedrock
    else:
        reverse = model_patterns.client_id_from_vertex
        # a Model Garden name listed with a dated version is listed as that dated id
        dated = {native.partition("@")[0] for native in served.ids if "@" in native}
        natives = [native for native in served.ids if "@" in native or native not in dated]
    newer = sorted(
        {
            client_id
            for native in natives
            if (client_id := reverse(native)) is not None and catalogue_entry(client_id) is None
        },
        reverse=True,
    )
    out = [
        model_info(client_id, model_patterns.display_name(client_id), UNKNOWN_RELEASE)
        for client_id in newer
        if _servable(resolver, client_id)
    ]
    out.extend(
        model_info(entry.alias, entry.display_name, entry.created_at)
        for entry in FIRST_PARTY_MODELS
        if _servable(resolver, entry.alias)
    )
    return out


def _servable(resolver: ModelResolver, model: str) -> bool:
    try:
        resolver.resolve(model)
    except UnknownModel:
        return False
    return True


def describe_model_map(model_map: Mapping[str, str]) -> str:
    """For the start-up log: every configured substitution, so none is silent."""
    if not model_map:
        return "none"
    return ", ".join(f"{name} -> {target}" for name, target in model_map.items())
