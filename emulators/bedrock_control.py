"""The Bedrock control-plane reads the emulator answers: ListInferenceProfiles, ListFoundationModels.

Shapes from botocore's service model ``botocore/data/bedrock/2023-04-20/service-2.json``
(rest-json, signing name ``bedrock``), so botocore's ``bedrock`` client parses them:

* ``GET /inference-profiles`` (``ListInferenceProfiles``): query ``maxResults`` (1-1000),
  ``nextToken``, ``type`` (``SYSTEM_DEFINED`` | ``APPLICATION``; absent: both [UNVERIFIED which the
  real API returns then]) -> ``{"inferenceProfileSummaries":[{inferenceProfileName, description,
  createdAt, updatedAt, inferenceProfileArn, models:[{modelArn}], inferenceProfileId, status,
  type}], "nextToken"?}``. Claude Code's Bedrock mode calls this path at start (providers.md
  section 7).
* ``GET /foundation-models`` (``ListFoundationModels``): query ``byProvider``, ``byInferenceType``
  (``ON_DEMAND`` | ``PROVISIONED``), ``byOutputModality``, ``byCustomizationType`` ->
  ``{"modelSummaries":[{modelArn, modelId, modelName, providerName, inputModalities,
  outputModalities, responseStreamingSupported, customizationsSupported, inferenceTypesSupported,
  modelLifecycle:{status}}]}`` (not paginated in the service model).

What is listed is exactly what the runtime routes accept (:mod:`.bedrock_models`): one
system-defined profile per base model for the configured region's geography and ``global``
(AWS user guide, "Supported Regions and models for inference profiles": a source region's profiles
are those of its geography plus the global ones), every base model as ``ON_DEMAND`` (the emulator
invokes base ids directly), and the application inference profiles of
:attr:`~.bedrock_config.BedrockOptions.inference_profiles`. Timestamps are epoch seconds, the
rest-json default. Requests are authenticated like the runtime routes (SigV4 or a Bedrock API
key, :mod:`.bedrock_sigv4`).
"""

from __future__ import annotations

import datetime
from typing import Any, Final

import orjson
from aiohttp import web

from .bedrock_config import BedrockState, get_bedrock_state
from .bedrock_exceptions import validation
from .bedrock_models import BEDROCK_MODEL_IDS
from .bedrock_sigv4 import authenticate
from .catalog import ModelCatalog
from .state import get_state

INFERENCE_PROFILES_PATH: Final = "/inference-profiles"
FOUNDATION_MODELS_PATH: Final = "/foundation-models"
CONTROL_PATHS: Final = frozenset({INFERENCE_PROFILES_PATH, FOUNDATION_MODELS_PATH})
ACCOUNT: Final = "123456789012"
PROVIDER_NAME: Final = "Anthropic"
PROFILE_TYPES: Final = ("SYSTEM_DEFINED", "APPLICATION")
INFERENCE_TYPES: Final = ("ON_DEMAND", "PROVISIONED")
_GEOGRAPHY_BY_REGION_HEAD: Final = {"us": "us", "eu": "eu", "ap": "apac", "ca": "ca"}
_GEOGRAPHY_NAMES: Final = {"us": "US", "eu": "EU", "apac": "APAC", "ca": "CA", "global": "Global"}


def profile_geographies(region: str) -> tuple[str, ...]:
    """The inference-profile prefixes a source region lists: its geography's and ``global``."""
    head = region.split("-", 1)[0]
    own = "us-gov" if region.startswith("us-gov-") else _GEOGRAPHY_BY_REGION_HEAD.get(head)
    return (own, "global") if own else ("global",)


def _epoch(iso: str) -> float:
    return datetime.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def _foundation_arn(region: str, base_id: str) -> str:
    return f"arn:aws:bedrock:{region}::foundation-model/{base_id}"


def _display(catalog: ModelCatalog, base_id: str) -> tuple[str, float]:
    spec = catalog.resolve(BEDROCK_MODEL_IDS[base_id])
    if spec is None:
        return base_id, 0.0
    return spec.display_name, _epoch(spec.created_at)


def inference_profiles(bedrock: BedrockState, catalog: ModelCatalog) -> list[dict[str, Any]]:
    """Every profile the emulator serves, system-defined first, in a stable order."""
    region = bedrock.options.region
    out: list[dict[str, Any]] = []
    for geography in profile_geographies(region):
        for base_id in sorted(BEDROCK_MODEL_IDS):
            name, created = _display(catalog, base_id)
            label = _GEOGRAPHY_NAMES.get(geography, geography.upper())
            profile_id = f"{geography}.{base_id}"
            out.append(
                {
                    "inferenceProfileName": f"{label} Anthropic {name}",
                    "description": f"Routes requests to Anthropic {name} in {label} regions.",
                    "createdAt": created,
                    "updatedAt": created,
                    "inferenceProfileArn": f"arn:aws:bedrock:{region}:{ACCOUNT}:inference-profile/{profile_id}",
                    "models": [{"modelArn": _foundation_arn(region, base_id)}],
                    "inferenceProfileId": profile_id,
                    "status": "ACTIVE",
                    "type": "SYSTEM_DEFINED",
                }
            )
    by_model = {model: base for base, model in BEDROCK_MODEL_IDS.items()}
    for arn, model in sorted(bedrock.options.inference_profiles.items()):
        base = by_model.get(model)
        profile_id = arn.rpartition("/")[2]
        out.append(
            {
                "inferenceProfileName": profile_id,
                "inferenceProfileArn": arn,
                "models": [{"modelArn": _foundation_arn(region, base)}] if base else [],
                "inferenceProfileId": profile_id,
                "status": "ACTIVE",
                "type": "APPLICATION",
            }
        )
    return out


def foundation_models(bedrock: BedrockState, catalog: ModelCatalog) -> list[dict[str, Any]]:
    region = bedrock.options.region
    out = []
    for base_id in sorted(BEDROCK_MODEL_IDS):
        name, _ = _display(catalog, base_id)
        out.append(
            {
                "modelArn": _foundation_arn(region, base_id),
                "modelId": base_id,
                "modelName": name,
                "providerName": PROVIDER_NAME,
                "inputModalities": ["TEXT", "IMAGE"],
                "outputModalities": ["TEXT"],
                "responseStreamingSupported": True,
                "customizationsSupported": [],
                "inferenceTypesSupported": ["ON_DEMAND"],
                "modelLifecycle": {"status": "ACTIVE"},
            }
        )
    return out


def _bounded_int(query: Any, name: str, low: int, high: int, default: int) -> int:
    raw = query.get(name)
    if raw is None:
        return default
    if not raw.isdigit() or not low <= int(raw) <= high:
        raise validation(
            f"1 validation error detected: Value '{raw}' at '{name}' failed to satisfy constraint: "
            f"Member must have value between {low} and {high}"
        )
    return int(raw)


def _enum(query: Any, name: str, allowed: tuple[str, ...]) -> str | None:
    raw: str | None = query.get(name)
    if raw is not None and raw not in allowed:
        raise validation(
            f"1 validation error detected: Value '{raw}' at '{name}' failed to satisfy constraint: "
            f"Member must satisfy enum value set: [{', '.join(allowed)}]"
        )
    return raw


def _list_profiles(request: web.Request, bedrock: BedrockState, catalog: ModelCatalog) -> dict[str, Any]:
    query = request.query
    size = _bounded_int(query, "maxResults", 1, 1000, 1000)
    kind = _enum(query, "type", PROFILE_TYPES)
    token = query.get("nextToken")
    start = int(token) if token is not None and token.isdigit() else 0
    if token is not None and not token.isdigit():
        raise validation("Invalid pagination token.")
    profiles = [p for p in inference_profiles(bedrock, catalog) if kind is None or p["type"] == kind]
    page: dict[str, Any] = {"inferenceProfileSummaries": profiles[start : start + size]}
    if start + size < len(profiles):
        page["nextToken"] = str(start + size)
    return page


def _list_models(request: web.Request, bedrock: BedrockState, catalog: ModelCatalog) -> dict[str, Any]:
    query = request.query
    provider = query.get("byProvider")
    inference = _enum(query, "byInferenceType", INFERENCE_TYPES)
    modality = query.get("byOutputModality")
    customization = query.get("byCustomizationType")
    models = [
        m
        for m in foundation_models(bedrock, catalog)
        if (provider is None or provider.lower() == m["providerName"].lower())
        and (inference is None or inference in m["inferenceTypesSupported"])
        and (modality is None or modality in m["outputModalities"])
        and (customization is None or customization in m["customizationsSupported"])
    ]
    return {"modelSummaries": models}


async def handle_control(request: web.Request, path: str, request_id: str) -> web.Response:
    """``GET /inference-profiles`` or ``GET /foundation-models``, authenticated like invokes."""
    state = get_state(request.app)
    bedrock = get_bedrock_state(request.app)
    authenticate(
        method=request.method,
        raw_path=request.raw_path,
        headers=request.headers,
        body=await request.read(),
        options=bedrock.options,
        issuer=bedrock.issuer,
        now=state.config.clock.time(),
    )
    catalog = state.config.catalog
    page = (
        _list_profiles(request, bedrock, catalog)
        if path == INFERENCE_PROFILES_PATH
        else _list_models(request, bedrock, catalog)
    )
    return web.Response(
        body=orjson.dumps(page), content_type="application/json", headers={"x-amzn-RequestId": request_id}
    )
