"""The Claude models the Vertex AI emulator serves, by Vertex id, and their Model Garden listing.

Vertex ids are ``<name>@<date>`` for dated models and the bare name for the newest ones
(``../shared/design/providers.md`` sections 3 and 7: Google's docs and the SDK constants for the
dated ids). For the newest generation the source is what Claude Code 2.1.332 itself invokes in
its Vertex mode (same section 7): ``claude-opus-5-5`` (default/``opus``), ``claude-sonnet-5-5``
(``sonnet``) and ``claude-haiku-4-5@20251001`` (``haiku``), so the emulator serves no
``claude-haiku-5-5``. First-party aliases (``claude-sonnet-4-5``) are not Vertex ids.

``GET /v1beta1/publishers/anthropic/models`` (``ModelGardenService.ListPublisherModels``, the
``v1beta1`` REST surface: ``pageSize``, ``pageToken`` -> ``{"publisherModels":[...],
"nextPageToken"?}``) lists one ``PublisherModel`` per served id: ``name``
``publishers/anthropic/models/<name>``, ``versionId`` the date of a dated id and ``"001"``
otherwise [UNVERIFIED for Claude: the API documents ``versionId`` as an opaque version string].
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from .catalog import ModelCatalog, ModelSpec

VERTEX_MODEL_IDS: Final[Mapping[str, str]] = {
    "claude-opus-5-5": "claude-opus-5-5",
    "claude-sonnet-5-5": "claude-sonnet-5-5",
    "claude-opus-4-8": "claude-opus-4-8",
    "claude-opus-4-7": "claude-opus-4-7",
    "claude-opus-4-6": "claude-opus-4-6",
    "claude-sonnet-4-6": "claude-sonnet-4-6",
    "claude-opus-4-5@20251101": "claude-opus-4-5-20251101",
    "claude-haiku-4-5@20251001": "claude-haiku-4-5-20251001",
    "claude-sonnet-4-5@20250929": "claude-sonnet-4-5-20250929",
    "claude-opus-4-1@20250805": "claude-opus-4-1-20250805",
    "claude-opus-4@20250514": "claude-opus-4-20250514",
    "claude-sonnet-4@20250514": "claude-sonnet-4-20250514",
    "claude-3-7-sonnet@20250219": "claude-3-7-sonnet-20250219",
    "claude-3-5-haiku@20241022": "claude-3-5-haiku-20241022",
    "claude-3-haiku@20240307": "claude-3-haiku-20240307",
}

PUBLISHER_MODELS_PATH: Final = "/v1beta1/publishers/anthropic/models"
DEFAULT_PAGE_SIZE: Final = 100
UNDATED_VERSION: Final = "001"


def vertex_model(catalog: ModelCatalog, model_id: str) -> ModelSpec | None:
    """The catalogue model a Vertex id names, or ``None`` (404 ``NOT_FOUND``)."""
    name = VERTEX_MODEL_IDS.get(model_id)
    return catalog.resolve(name) if name is not None else None


def publisher_models(catalog: ModelCatalog) -> list[dict[str, Any]]:
    """One ``PublisherModel`` per served Vertex id the catalogue knows, in table order."""
    out = []
    for vertex_id, name in VERTEX_MODEL_IDS.items():
        if catalog.resolve(name) is None:
            continue
        model, _, version = vertex_id.partition("@")
        out.append(
            {
                "name": f"publishers/anthropic/models/{model}",
                "versionId": version or UNDATED_VERSION,
                "openSourceCategory": "PROPRIETARY",
                "launchStage": "GA",
            }
        )
    return out


def publisher_models_page(catalog: ModelCatalog, page_size: str | None, page_token: str | None) -> Any:
    """One page of the list, or ``None`` when the paging parameters are invalid."""
    if page_size is not None and not page_size.isdigit():
        return None
    if page_token is not None and not page_token.isdigit():
        return None
    size = int(page_size) if page_size and int(page_size) > 0 else DEFAULT_PAGE_SIZE
    start = int(page_token) if page_token else 0
    models = publisher_models(catalog)
    page: dict[str, Any] = {"publisherModels": models[start : start + size]}
    if start + size < len(models):
        page["nextPageToken"] = str(start + size)
    return page
