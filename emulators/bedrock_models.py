"""Bedrock model identifiers the emulator serves, and how they resolve to catalogue models.

Accepted in the ``/model/{modelId}/...`` path (percent-decoded first):

* base model ids ``anthropic.<name>-v1:0`` (the table below, after AWS's model catalogue);
* cross-region inference profiles: a geography prefix (``us.``, ``eu.``, ``apac.``, ``jp.``,
  ``au.``, ``ca.``, ``us-gov.``, ``global.``) before a base id;
* ARNs of foundation models and system inference profiles wrapping those ids;
* application inference profile ARNs listed in
  :attr:`~emulators.bedrock_config.BedrockOptions.inference_profiles`.

CountTokens accepts base model ids (or foundation-model ARNs) only, as the real API does.

Sources of the table: AWS's model-id list (dated ``-v1:0`` ids; ``anthropic.claude-opus-4-6-v1``
and ``anthropic.claude-sonnet-4-6`` without a date) as collected in
``../shared/design/providers.md`` section 7, and for the newest model what Claude Code 2.1.332
itself invokes in its Bedrock mode (same section): ``us.anthropic.claude-opus-5-5`` for its
default/``opus`` alias. Its ``sonnet`` and ``haiku`` aliases invoke
``us.anthropic.claude-sonnet-4-5-20250929-v1:0`` and ``us.anthropic.claude-haiku-4-5-20251001-v1:0``
there, so nothing shows Bedrock serving ``claude-sonnet-5-5`` or ``claude-haiku-5-5``: the emulator
does not (404, like any model it does not know).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from .catalog import ModelCatalog, ModelSpec

BEDROCK_MODEL_IDS: Final[Mapping[str, str]] = {
    "anthropic.claude-opus-5-5": "claude-opus-5-5",
    "anthropic.claude-opus-4-8-v1": "claude-opus-4-8",
    "anthropic.claude-opus-4-7-v1": "claude-opus-4-7",
    "anthropic.claude-opus-4-6-v1": "claude-opus-4-6",
    "anthropic.claude-sonnet-4-6": "claude-sonnet-4-6",
    "anthropic.claude-opus-4-5-20251101-v1:0": "claude-opus-4-5-20251101",
    "anthropic.claude-haiku-4-5-20251001-v1:0": "claude-haiku-4-5-20251001",
    "anthropic.claude-sonnet-4-5-20250929-v1:0": "claude-sonnet-4-5-20250929",
    "anthropic.claude-opus-4-1-20250805-v1:0": "claude-opus-4-1-20250805",
    "anthropic.claude-opus-4-20250514-v1:0": "claude-opus-4-20250514",
    "anthropic.claude-sonnet-4-20250514-v1:0": "claude-sonnet-4-20250514",
    "anthropic.claude-3-7-sonnet-20250219-v1:0": "claude-3-7-sonnet-20250219",
    "anthropic.claude-3-5-haiku-20241022-v1:0": "claude-3-5-haiku-20241022",
    "anthropic.claude-3-haiku-20240307-v1:0": "claude-3-haiku-20240307",
}

GEOGRAPHIES: Final = frozenset({"us", "eu", "apac", "jp", "au", "ca", "us-gov", "global"})


def _arn_resource(model_id: str) -> tuple[str, str] | None:
    """``(resource type, name)`` of a Bedrock ARN, or ``None`` for anything else."""
    parts = model_id.split(":", 5)
    if len(parts) != 6 or parts[0] != "arn" or parts[2] != "bedrock":
        return None
    kind, _, name = parts[5].partition("/")
    return kind, name


def base_model_id(model_id: str) -> str | None:
    """The base model id behind a base id, a geography-prefixed profile id or a system ARN."""
    resource = _arn_resource(model_id)
    if resource is not None:
        kind, name = resource
        if kind not in ("foundation-model", "inference-profile"):
            return None
        model_id = name
    head, dot, rest = model_id.partition(".")
    if dot and head in GEOGRAPHIES:
        model_id = rest
    return model_id if model_id in BEDROCK_MODEL_IDS else None


def resolve_model(model_id: str, catalog: ModelCatalog, profiles: Mapping[str, str]) -> ModelSpec | None:
    """The catalogue model an invoke path names, or ``None`` (404 ResourceNotFoundException)."""
    if model_id in profiles:
        return catalog.resolve(profiles[model_id])
    base = base_model_id(model_id)
    return catalog.resolve(BEDROCK_MODEL_IDS[base]) if base is not None else None


def resolve_foundation_model(model_id: str, catalog: ModelCatalog) -> ModelSpec | None:
    """The catalogue model of a CountTokens path: base ids and foundation-model ARNs only."""
    resource = _arn_resource(model_id)
    if resource is not None:
        if resource[0] != "foundation-model":
            return None
        model_id = resource[1]
    name = BEDROCK_MODEL_IDS.get(model_id)
    return catalog.resolve(name) if name is not None else None
