"""Model names: the catalogue of first-party ids, their Bedrock and Vertex AI ids, and resolution.

Clients send first-party names (``claude-sonnet-4-5``, dated ids such as
``claude-sonnet-4-5-20250929``). Each cloud upstream names the same model differently:

* Bedrock: ``anthropic.<name>-<date>-v1:0`` (newer models drop the date), usually invoked through a
  cross-region inference profile that prefixes a geography (``us.``, ``eu.``, ``apac.``, ``jp.``,
  ``global.``); ARNs of inference profiles and provisioned models are passed through.
* Vertex AI: ``<name>@<date>`` (newer models drop the date).

The table below is the built-in default (catalogue as published by the providers up to 2026-11;
ids for models newer than those in the public docs follow the providers' naming pattern and should
be checked against your account). ``GATEWAY_MODEL_MAP`` (a JSON object, or a path to one) maps any
client-visible name to any upstream id and takes precedence. A provider-native id passes through
unchanged; any other name is answered with 404 ``not_found_error`` naming the model.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from gateway.config import ProviderName


@dataclass(frozen=True, slots=True)
class ModelEntry:
    alias: str
    dated: str | None
    display_name: str
    bedrock: str | None
    vertex: str | None
    created_at: str


FIRST_PARTY_MODELS: Final[tuple[ModelEntry, ...]] = (
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

BEDROCK_GEOGRAPHIES: Final = ("us", "eu", "apac", "jp", "au", "ca", "us-gov", "global")
_GEOGRAPHY_ALTERNATION: Final = "|".join(re.escape(g) for g in BEDROCK_GEOGRAPHIES)
_BEDROCK_NATIVE = re.compile(rf"^(arn:aws[a-z-]*:bedrock:|((?:{_GEOGRAPHY_ALTERNATION})\.)?anthropic\.)")
_VERTEX_NATIVE = re.compile(r"^claude-[a-z0-9-]+@\d{8}$")


def catalogue_entry(model: str) -> ModelEntry | None:
    """The catalogue entry of a first-party name (alias or dated id), ignoring a ``[1m]`` suffix."""
    return _BY_NAME.get(model.split("[", 1)[0])


def metric_label(model: str) -> str:
    """A bounded metric label for any model name: its catalogue alias, or ``other``.

    Provider-native ids (Bedrock, Vertex) are folded back to the catalogue alias too.
    """
    entry = catalogue_entry(model)
    if entry is not None:
        return entry.alias
    native = _NATIVE_LABELS.get(_strip_geography(model))
    return native if native is not None else OTHER


def _strip_geography(model: str) -> str:
    head, dot, rest = model.partition(".")
    return rest if dot and head in BEDROCK_GEOGRAPHIES else model


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


class UnknownModel(Exception):
    def __init__(self, model: str) -> None:
        super().__init__(model)
        self.model = model


@dataclass(frozen=True, slots=True)
class ModelResolver:
    """Maps a client's model name to the id the configured upstream expects."""

    provider: ProviderName
    overrides: Mapping[str, str]
    bedrock_prefix: str | None = None  # "us", "eu", "global"..., or None for base model ids

    def resolve(self, model: str) -> str:
        """The upstream id for ``model``; raises ``UnknownModel`` when there is none."""
        if model in self.overrides:
            return self.overrides[model]
        if self.provider in (ProviderName.ANTHROPIC, ProviderName.FOUNDRY):
            return model  # first-party names (Foundry: the deployment name) go as they are
        if self.provider is ProviderName.BEDROCK:
            if _BEDROCK_NATIVE.match(model):
                return model
            entry = catalogue_entry(model)
            if entry is None or entry.bedrock is None:
                raise UnknownModel(model)
            return f"{self.bedrock_prefix}.{entry.bedrock}" if self.bedrock_prefix else entry.bedrock
        if _VERTEX_NATIVE.match(model) or model in _VERTEX_IDS:
            return model
        entry = catalogue_entry(model)
        if entry is None or entry.vertex is None:
            raise UnknownModel(model)
        return entry.vertex

    def served(self) -> list[dict[str, str]]:
        """``GET /v1/models`` data for a cloud upstream: every client name this deployment maps."""
        out: list[dict[str, str]] = []
        seen: set[str] = set()
        for entry in FIRST_PARTY_MODELS:
            native = {
                ProviderName.BEDROCK: entry.bedrock,
                ProviderName.VERTEX: entry.vertex,
            }.get(self.provider, entry.alias)
            if native is None or entry.alias in seen:
                continue
            seen.add(entry.alias)
            out.append(_listing(entry.alias, entry.display_name, entry.created_at))
        for name in self.overrides:
            if name not in seen:
                seen.add(name)
                known = catalogue_entry(name)
                out.append(
                    _listing(
                        name,
                        known.display_name if known else name,
                        known.created_at if known else "1970-01-01T00:00:00Z",
                    )
                )
        return out


_VERTEX_IDS: Final = frozenset(e.vertex for e in FIRST_PARTY_MODELS if e.vertex is not None)


def _listing(model_id: str, display_name: str, created_at: str) -> dict[str, str]:
    return {"type": "model", "id": model_id, "display_name": display_name, "created_at": created_at}
