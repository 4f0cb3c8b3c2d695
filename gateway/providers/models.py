"""Model names: the catalogue of first-party ids, their Bedrock and Vertex AI ids, and resolution.

Resolution order: ``GATEWAY_MODEL_MAP``, native ids, the table, then :mod:`.model_patterns`; a
table row without a cloud id means "no evidence that cloud serves it". Unservable names are a 404
naming the model and ``GATEWAY_MODEL_MAP`` (:func:`unservable_message`).

Details: docs/internals/gateway-providers.md
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from gateway.provider_names import ProviderName
from gateway.providers import model_patterns
from gateway.providers.model_discovery import ModelCatalogue, ServedModels
from gateway.providers.model_patterns import BEDROCK_GEOGRAPHIES, strip_geography

__all__ = [
    "BEDROCK_GEOGRAPHIES",
    "FIRST_PARTY_MODELS",
    "OTHER",
    "ModelEntry",
    "ModelResolver",
    "UnknownModel",
    "answering_model",
]

UNKNOWN_RELEASE: Final = "1970-01-01T00:00:00Z"
"""``created_at`` when the release date is not published (the Models API uses the epoch too)."""


@dataclass(frozen=True, slots=True)
class ModelEntry:
    alias: str
    dated: str | None
    display_name: str
    bedrock: str | None  # None: no evidence Bedrock serves it (the naming pattern applies)
    vertex: str | None  # None: no evidence Vertex serves it (the naming pattern applies)
    created_at: str


FIRST_PARTY_MODELS: Final[tuple[ModelEntry, ...]] = (
    # What Claude Code 2.1.332 sends in its own provider modes (providers.md section 7): opus ->
    # Bedrock us.anthropic.claude-opus-5-5, Vertex claude-opus-5-5; sonnet -> Vertex
    # claude-sonnet-5-5 (its Bedrock mode sends Sonnet 4.5 instead); haiku -> Haiku 4.5 on both.
    ModelEntry("claude-opus-5-5", None, "Claude Opus 5.5", "anthropic.claude-opus-5-5", "claude-opus-5-5", UNKNOWN_RELEASE),
    ModelEntry("claude-sonnet-5-5", None, "Claude Sonnet 5.5", None, "claude-sonnet-5-5", UNKNOWN_RELEASE),
    ModelEntry("claude-haiku-5-5", None, "Claude Haiku 5.5", None, None, UNKNOWN_RELEASE),
    ModelEntry("claude-opus-4-8", None, "Claude Opus 4.8",
               "anthropic.claude-opus-4-8-v1", "claude-opus-4-8", "2026-10-01T00:00:00Z"),
    ModelEntry("claude-opus-4-7", None, "Claude Opus 4.7",
               "anthropic.claude-opus-4-7-v1", "claude-opus-4-7", "2026-06-01T00:00:00Z"),
    ModelEntry("claude-opus-4-6", None, "Claude Opus 4.6",
               "anthropic.claude-opus-4-6-v1", "claude-opus-4-6", "2026-02-01T00:00:00Z"),
    ModelEntry("claude-sonnet-4-6", None, "Claude Sonnet 4.6",
               "anthropic.claude-sonnet-4-6", "claude-sonnet-4-6", "2026-02-15T00:00:00Z"),
    ModelEntry("claude-opus-4-5", "claude-opus-4-5-20251101", "Claude Opus 4.5",
               "anthropic.claude-opus-4-5-20251101-v1:0", "claude-opus-4-5@20251101", "2025-11-01T00:00:00Z"),
    ModelEntry("claude-haiku-4-5", "claude-haiku-4-5-20251001", "Claude Haiku 4.5",
               "anthropic.claude-haiku-4-5-20251001-v1:0", "claude-haiku-4-5@20251001", "2025-10-01T00:00:00Z"),
    ModelEntry("claude-sonnet-4-5", "claude-sonnet-4-5-20250929", "Claude Sonnet 4.5",
               "anthropic.claude-sonnet-4-5-20250929-v1:0", "claude-sonnet-4-5@20250929", "2025-09-29T00:00:00Z"),
    ModelEntry("claude-opus-4-1", "claude-opus-4-1-20250805", "Claude Opus 4.1",
               "anthropic.claude-opus-4-1-20250805-v1:0", "claude-opus-4-1@20250805", "2025-08-05T00:00:00Z"),
    ModelEntry("claude-opus-4-0", "claude-opus-4-20250514", "Claude Opus 4",
               "anthropic.claude-opus-4-20250514-v1:0", "claude-opus-4@20250514", "2025-05-14T00:00:00Z"),
    ModelEntry("claude-sonnet-4-0", "claude-sonnet-4-20250514", "Claude Sonnet 4",
               "anthropic.claude-sonnet-4-20250514-v1:0", "claude-sonnet-4@20250514", "2025-05-14T00:00:00Z"),
    ModelEntry("claude-3-7-sonnet-latest", "claude-3-7-sonnet-20250219", "Claude Sonnet 3.7",
               "anthropic.claude-3-7-sonnet-20250219-v1:0", "claude-3-7-sonnet@20250219", "2025-02-19T00:00:00Z"),
    ModelEntry("claude-3-5-haiku-latest", "claude-3-5-haiku-20241022", "Claude Haiku 3.5",
               "anthropic.claude-3-5-haiku-20241022-v1:0", "claude-3-5-haiku@20241022", "2024-10-22T00:00:00Z"),
)  # fmt: skip

_BY_NAME: Final[dict[str, ModelEntry]] = {}
for _entry in FIRST_PARTY_MODELS:
    _BY_NAME[_entry.alias] = _entry
    if _entry.dated is not None:
        _BY_NAME[_entry.dated] = _entry

OTHER: Final = "other"

_GEOGRAPHY_ALTERNATION: Final = "|".join(re.escape(g) for g in BEDROCK_GEOGRAPHIES)
_BEDROCK_NATIVE = re.compile(rf"^(arn:aws[a-z-]*:bedrock:|((?:{_GEOGRAPHY_ALTERNATION})\.)?anthropic\.)")
_VERTEX_NATIVE = re.compile(r"^claude-[a-z0-9-]+@\d{8}$")


def catalogue_entry(model: str) -> ModelEntry | None:
    """The catalogue entry of a first-party name (alias or dated id), ignoring a ``[1m]`` suffix."""
    return _BY_NAME.get(model_patterns.base_name(model))


def metric_label(model: str) -> str:
    """A bounded metric label for any model name: its catalogue alias, or ``other``.

    Provider-native ids (Bedrock, Vertex) are folded back to the catalogue alias too.
    """
    entry = catalogue_entry(model)
    if entry is not None:
        return entry.alias
    native = _NATIVE_LABELS.get(strip_geography(model))
    return native if native is not None else OTHER


def answering_model(upstream_model: str | None, model: str) -> str:
    """The name of the model that answered, for its metric label: the id sent upstream (a model
    map's target, a provider-native id) when the catalogue knows it, else ``model``."""
    if upstream_model and metric_label(upstream_model) != OTHER:
        return upstream_model
    return model


_NATIVE_LABELS: Final[dict[str, str]] = {}
for _entry in FIRST_PARTY_MODELS:
    for _native in (_entry.bedrock, _entry.vertex):
        if _native is not None:
            _NATIVE_LABELS.setdefault(_native, _entry.alias)


def bedrock_geography(region: str) -> str:
    """The cross-region inference-profile prefix for an AWS region (``us-east-1`` -> ``us``)."""
    if region.startswith("us-gov-"):
        return "us-gov"
    if region.startswith("ap-northeast-1") or region.startswith("ap-northeast-3"):
        return "jp"
    if region.startswith("ap-southeast-2") or region.startswith("ap-southeast-4"):
        return "au"
    if region.startswith("ca-"):
        return "ca"
    head = region.split("-", 1)[0]
    return {"us": "us", "eu": "eu", "ap": "apac"}.get(head, "global")


def unservable_message(model: str, provider: ProviderName | str) -> str:
    """The 404 message for a model the upstream does not serve: the model and how to map it."""
    name = provider.value if isinstance(provider, ProviderName) else provider
    return f"model: {model} is not served by the {name} upstream (map it with GATEWAY_MODEL_MAP)"


class UnknownModel(Exception):
    """The upstream does not serve ``model`` (no mapping, no pattern, or not in its catalogue)."""

    def __init__(self, model: str, provider: ProviderName) -> None:
        self.model = model
        self.message = unservable_message(model, provider)
        super().__init__(self.message)


@dataclass(frozen=True, slots=True)
class ModelResolver:
    """Maps a client's model name to the id the configured upstream expects."""

    provider: ProviderName
    overrides: Mapping[str, str]
    bedrock_prefix: str | None = None  # "us", "eu", "global"..., or None for base model ids
    catalogue: ModelCatalogue | None = None  # model discovery (None: off)

    def resolve(self, model: str) -> str:
        """The upstream id for ``model``; raises ``UnknownModel`` when there is none."""
        if model in self.overrides:
            return self.overrides[model]
        if self.provider in (ProviderName.ANTHROPIC, ProviderName.FOUNDRY):
            return model  # first-party names (Foundry: the deployment name) go as they are
        served = self.catalogue.current if self.catalogue is not None else None
        if self._is_native(model):
            if served is not None and not model.startswith("arn:") and not self._listed(model, served):
                raise UnknownModel(model, self.provider)
            return model
        candidates = self.candidates(model)
        if not candidates:
            raise UnknownModel(model, self.provider)
        if served is None:
            return candidates[0]
        for candidate in candidates:
            if self._listed(candidate, served):
                return candidate
        raise UnknownModel(model, self.provider)

    def candidates(self, model: str) -> list[str]:
        """Upstream ids for ``model`` in order of preference: the table's, then the pattern's (on
        Bedrock each as the geography's profile, then as the base id). Without a catalogue the
        first is used; with one, the first the cloud lists."""
        entry = catalogue_entry(model)
        if self.provider is ProviderName.BEDROCK:
            bases = [entry.bedrock if entry is not None else None, model_patterns.bedrock_base_id(model)]
            out = []
            for base in dict.fromkeys(b for b in bases if b):
                out.extend([f"{self.bedrock_prefix}.{base}", base] if self.bedrock_prefix else [base])
            return out
        ids = [entry.vertex if entry is not None else None, model_patterns.vertex_id(model)]
        return list(dict.fromkeys(i for i in ids if i))

    def _is_native(self, model: str) -> bool:
        if self.provider is ProviderName.BEDROCK:
            return _BEDROCK_NATIVE.match(model) is not None
        return _VERTEX_NATIVE.match(model) is not None or model in _VERTEX_IDS

    def _listed(self, upstream_id: str, served: ServedModels) -> bool:
        if self.provider is ProviderName.VERTEX:
            return upstream_id.partition("@")[0] in served.names
        return upstream_id in served.ids


_VERTEX_IDS: Final = frozenset(e.vertex for e in FIRST_PARTY_MODELS if e.vertex is not None)
