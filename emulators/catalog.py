"""The models the emulator knows: ids, aliases, display data and per-model limits.

``min_cacheable_tokens`` follows the public prompt-caching table (1024 / 2048 / 4096 by model);
ids the installed SDK lists in ``ModelParam`` that are missing from the table below are accepted
too, with the default limits, so SDK-driven tests never trip over a model the SDK considers valid.
"""

from __future__ import annotations

import re
import typing
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from anthropic.types.model_param import ModelParam

DEFAULT_MIN_CACHEABLE_TOKENS = 1024
DEFAULT_MAX_OUTPUT_TOKENS = 128_000
UNKNOWN_RELEASE_DATE = "1970-01-01T00:00:00Z"
"""The Models API uses the epoch when a release date is unknown."""


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """One model: canonical id, accepted aliases and the limits the emulator enforces."""

    id: str
    display_name: str
    created_at: str
    min_cacheable_tokens: int = DEFAULT_MIN_CACHEABLE_TOKENS
    max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS
    context_window: int = 200_000
    aliases: tuple[str, ...] = ()

    def to_model_info(self) -> dict[str, object]:
        """The ``/v1/models`` representation."""
        return {
            "type": "model",
            "id": self.id,
            "display_name": self.display_name,
            "created_at": self.created_at,
            "lifecycle": "active",
            "max_input_tokens": self.context_window,
            "max_tokens": self.max_output_tokens,
        }


@dataclass(frozen=True)
class ModelCatalog:
    """An ordered set of :class:`ModelSpec` (listing order: as given), looked up by id or alias."""

    models: tuple[ModelSpec, ...]
    _index: dict[str, ModelSpec] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        index: dict[str, ModelSpec] = {}
        for spec in self.models:
            for name in (spec.id, *spec.aliases):
                if name in index:
                    raise ValueError(f"model id {name!r} appears twice in the catalogue")
                index[name] = spec
        object.__setattr__(self, "_index", index)

    def resolve(self, name: str) -> ModelSpec | None:
        """The spec for an id or alias, or ``None`` for an unknown model."""
        return self._index.get(name)

    def __iter__(self) -> Iterator[ModelSpec]:
        return iter(self.models)

    def __len__(self) -> int:
        return len(self.models)

    def with_models(self, extra: Iterable[ModelSpec]) -> ModelCatalog:
        """A new catalogue with ``extra`` appended."""
        return ModelCatalog((*self.models, *extra))


_KNOWN_MODELS: tuple[ModelSpec, ...] = (
    ModelSpec("claude-opus-4-8", "Claude Opus 4.8", "2026-09-15T00:00:00Z", 4096, 128_000),
    ModelSpec("claude-opus-4-7", "Claude Opus 4.7", "2026-05-20T00:00:00Z", 4096, 128_000),
    ModelSpec("claude-sonnet-4-6", "Claude Sonnet 4.6", "2026-02-17T00:00:00Z", 2048, 64_000),
    ModelSpec("claude-opus-4-6", "Claude Opus 4.6", "2026-02-05T00:00:00Z", 4096, 128_000),
    ModelSpec(
        "claude-opus-4-5-20251101",
        "Claude Opus 4.5",
        "2025-11-24T00:00:00Z",
        4096,
        64_000,
        aliases=("claude-opus-4-5",),
    ),
    ModelSpec(
        "claude-haiku-4-5-20251001",
        "Claude Haiku 4.5",
        "2025-10-15T00:00:00Z",
        4096,
        64_000,
        aliases=("claude-haiku-4-5",),
    ),
    ModelSpec(
        "claude-sonnet-4-5-20250929",
        "Claude Sonnet 4.5",
        "2025-09-29T00:00:00Z",
        1024,
        64_000,
        aliases=("claude-sonnet-4-5",),
    ),
    ModelSpec(
        "claude-opus-4-1-20250805",
        "Claude Opus 4.1",
        "2025-08-05T00:00:00Z",
        1024,
        32_000,
        aliases=("claude-opus-4-1",),
    ),
    ModelSpec(
        "claude-opus-4-20250514",
        "Claude Opus 4",
        "2025-05-22T00:00:00Z",
        1024,
        32_000,
        aliases=("claude-opus-4-0", "claude-4-opus-20250514"),
    ),
    ModelSpec(
        "claude-sonnet-4-20250514",
        "Claude Sonnet 4",
        "2025-05-22T00:00:00Z",
        1024,
        64_000,
        aliases=("claude-sonnet-4-0", "claude-4-sonnet-20250514"),
    ),
    ModelSpec(
        "claude-3-7-sonnet-20250219",
        "Claude Sonnet 3.7",
        "2025-02-24T00:00:00Z",
        1024,
        64_000,
        aliases=("claude-3-7-sonnet-latest",),
    ),
    ModelSpec(
        "claude-3-5-haiku-20241022",
        "Claude Haiku 3.5",
        "2024-10-22T00:00:00Z",
        2048,
        8_192,
        aliases=("claude-3-5-haiku-latest",),
    ),
    ModelSpec("claude-3-haiku-20240307", "Claude Haiku 3", "2024-03-07T00:00:00Z", 2048, 4_096),
)

_VERSION_RE = re.compile(r"^claude-([a-z]+)-(\d+)(?:-(\d+))?$")


def _display_name(model_id: str) -> str:
    match = _VERSION_RE.match(model_id)
    if match is None:
        return model_id
    family, major, minor = match.groups()
    version = major if minor is None else f"{major}.{minor}"
    return f"Claude {family.capitalize()} {version}"


def sdk_model_ids() -> tuple[str, ...]:
    """The literal model ids of the installed SDK's ``ModelParam``."""
    ids: list[str] = []
    for arg in typing.get_args(ModelParam):
        ids.extend(a for a in typing.get_args(arg) if isinstance(a, str))
    return tuple(ids)


def _build_default_catalog() -> ModelCatalog:
    known = ModelCatalog(_KNOWN_MODELS)
    extra = [
        ModelSpec(model_id, _display_name(model_id), UNKNOWN_RELEASE_DATE)
        for model_id in sdk_model_ids()
        if known.resolve(model_id) is None
    ]
    # Known models (newest first) come first; SDK-only ids have no known release date.
    return ModelCatalog((*_KNOWN_MODELS, *extra))


DEFAULT_CATALOG: ModelCatalog = _build_default_catalog()
