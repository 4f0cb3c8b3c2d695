"""Shaping a first-party request for Bedrock's native InvokeModel / CountTokens APIs.

The body is re-serialised with orjson (key order kept), so an unchanged prefix stays
byte-identical; headers are joined exactly as signed, and ``x-amz-*`` headers from clients are
dropped (the signer owns them).

Details: docs/internals/gateway-providers.md
"""

from __future__ import annotations

import base64
import urllib.parse
from collections.abc import Iterable, Mapping
from typing import Any, Final

import orjson

from gateway.providers.models import BEDROCK_GEOGRAPHIES

BEDROCK_VERSION: Final = "bedrock-2023-05-31"
COUNT_TOKENS_MIN_MAX_TOKENS: Final = 1024

_NOT_TO_BEDROCK: Final = frozenset(
    {
        "anthropic-beta",
        "anthropic-version",
        "x-client-request-id",
        "accept",
        "content-type",
        "content-length",
        "host",
    }
)
_BODY_KEYS_REMOVED: Final = ("model", "stream", "tags", "anthropic_beta", "anthropic_version")


def model_path(model: str, action: str) -> str:
    """``/model/{quoted id}/{action}``; ``:`` stays, ``/`` (in ARNs) becomes ``%2F``."""
    return f"/model/{urllib.parse.quote(model, safe=':')}/{action}"


def invoke_body(payload: Mapping[str, Any], betas: Iterable[str]) -> dict[str, Any]:
    """The InvokeModel body for a (policy-applied) first-party Messages payload."""
    body = {key: value for key, value in payload.items() if key not in _BODY_KEYS_REMOVED}
    beta_list = list(betas)
    if beta_list:
        body["anthropic_beta"] = beta_list
    body["anthropic_version"] = BEDROCK_VERSION
    return body


def invoke_body_bytes(payload: Mapping[str, Any], betas: Iterable[str]) -> bytes:
    return orjson.dumps(invoke_body(payload, betas))


def count_tokens_body(payload: Mapping[str, Any], betas: Iterable[str]) -> bytes:
    """The CountTokens request for a first-party ``count_tokens`` payload."""
    body = invoke_body(payload, betas)
    if body.get("tools") == []:
        del body["tools"]
    floor = COUNT_TOKENS_MIN_MAX_TOKENS
    thinking = body.get("thinking")
    if isinstance(thinking, dict):
        budget = thinking.get("budget_tokens")
        if isinstance(budget, int) and not isinstance(budget, bool):
            floor = max(floor, budget + 1)
    current = body.get("max_tokens")
    if not isinstance(current, int) or isinstance(current, bool) or current < floor:
        body["max_tokens"] = floor
    encoded = base64.b64encode(orjson.dumps(body)).decode("ascii")
    return orjson.dumps({"input": {"invokeModel": {"body": encoded}}})


def foundation_model_id(model: str) -> str | None:
    """The foundation-model id CountTokens accepts for ``model``, or ``None`` when there is none.

    ``us.anthropic.x`` -> ``anthropic.x``; ARNs of foundation models and of system inference
    profiles are unwrapped the same way; application inference profiles and provisioned models
    name no model in their ARN, so they have no answer.
    """
    if model.startswith("arn:"):
        resource = model.split(":", 5)[-1]
        kind, _, name = resource.partition("/")
        if kind not in ("foundation-model", "inference-profile") or not name:
            return None
        model = name
    head, dot, rest = model.partition(".")
    if dot and head in BEDROCK_GEOGRAPHIES:
        model = rest
    return model if model.startswith("anthropic.") else None


def upstream_headers(
    client_headers: Iterable[tuple[str, str]], header_betas: Iterable[str] = ()
) -> list[tuple[str, str]]:
    """The client's headers as they go to Bedrock (before signing), repeated names joined, with
    ``header_betas`` as the ``anthropic-beta`` header (none when empty)."""
    merged: dict[str, tuple[str, list[str]]] = {}
    for name, value in client_headers:
        lower = name.lower()
        if lower in _NOT_TO_BEDROCK or lower.startswith("x-amz-"):
            continue
        entry = merged.get(lower)
        if entry is None:
            merged[lower] = (name, [value])
        else:
            entry[1].append(value)
    headers = [(name, ",".join(values)) for name, values in merged.values()]
    betas = ",".join(header_betas)
    if betas:
        headers.append(("anthropic-beta", betas))
    headers += [("Accept", "application/json"), ("Content-Type", "application/json")]
    return headers
