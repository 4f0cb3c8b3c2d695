"""InvokeModel body validation with Bedrock's wording, on top of the first-party rules.

Bedrock-specific checks, in order (each a 400 ``ValidationException``):

* ``anthropic_version`` missing or not accepted (``bedrock-2023-05-31`` or the installed SDK's
  ``ANTHROPIC_API_VERSION``, read at runtime): ``Malformed input request: #: required key
  [anthropic_version] not found, please reformat your input and try again.``;
* a ``model`` or ``stream`` key: ``#: extraneous key [model] is not permitted`` (same frame);
* ``anthropic_beta`` not a list of strings: ``#/anthropic_beta: expected type: JSONArray, found:
  String`` / ``#/anthropic_beta/0: expected type: String, found: Integer``;
* a beta outside Bedrock's allow-list (the gateway's ``DEFAULT_POLICY`` for bedrock, so the
  gateway's dropping is what is tested): ``invalid beta flag``;
* body fields Bedrock rejects: top-level ``tags`` and ``cache_control.scope`` (the body halves of
  betas Bedrock does not offer): ``<path>: Extra inputs are not permitted``.

Then the first-party rules (:func:`~gateway.emulator.validation.validate_body`: ``max_tokens``,
``messages``, at most 4 ``cache_control`` blocks, ``ttl``, thinking budget...), their messages
relayed as Bedrock relays the model's, except missing/unknown top-level keys, which get the
schema wording above. Finally a prompt longer than the model's context window (1M with
``context-1m-2025-08-07``) is ``Input is too long.``.
"""

from __future__ import annotations

import re
from typing import Any, Final

import anthropic._constants
import orjson

from gateway.config import ProviderName
from gateway.providers.betas import DEFAULT_POLICY

from .bedrock_exceptions import INPUT_TOO_LONG, malformed, validation
from .catalog import ModelSpec
from .config import EmulatorConfig
from .errors import ApiError
from .json_types import JSONObject
from .prompt import iter_cache_controls
from .validation import ValidatedRequest, validate_body

BEDROCK_VERSION: Final = "bedrock-2023-05-31"
BEDROCK_BETAS: Final = DEFAULT_POLICY[ProviderName.BEDROCK] or frozenset()
CONTEXT_1M_BETA: Final = "context-1m-2025-08-07"
CONTEXT_1M: Final = 1_000_000
_TOP_LEVEL = re.compile(r"^(\w+): (Field required|Extra inputs are not permitted)$")


def accepted_versions() -> frozenset[str]:
    return frozenset({BEDROCK_VERSION, anthropic._constants.ANTHROPIC_API_VERSION})


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "Boolean"
    if isinstance(value, int):
        return "Integer"
    if isinstance(value, float):
        return "Number"
    if isinstance(value, str):
        return "String"
    if isinstance(value, dict):
        return "JSONObject"
    return "Null" if value is None else "JSONArray"


def parse_object(raw: bytes) -> JSONObject:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise malformed("#: expected type: JSONObject, found: invalid JSON") from None
    if not isinstance(body, dict):
        raise malformed(f"#: expected type: JSONObject, found: {_json_type(body)}")
    return body


def _betas(body: JSONObject) -> tuple[str, ...]:
    value = body.get("anthropic_beta", [])
    if not isinstance(value, list):
        raise malformed(f"#/anthropic_beta: expected type: JSONArray, found: {_json_type(value)}")
    for index, item in enumerate(value):
        if not isinstance(item, str):
            raise malformed(f"#/anthropic_beta/{index}: expected type: String, found: {_json_type(item)}")
    if any(beta not in BEDROCK_BETAS for beta in value):
        raise validation("invalid beta flag")
    return tuple(value)


def _translate(error: ApiError) -> ApiError | Exception:
    if error.status != 400:
        return error
    match = _TOP_LEVEL.match(error.message)
    if match is not None:
        key, kind = match.groups()
        if kind == "Field required":
            return malformed(f"#: required key [{key}] not found")
        return malformed(f"#: extraneous key [{key}] is not permitted")
    return validation(error.message)


def validate_invoke(
    body: JSONObject, spec: ModelSpec, config: EmulatorConfig, *, stream: bool
) -> ValidatedRequest:
    """Validate an InvokeModel body for ``spec``; raise ``BedrockError`` (or ``ApiError``)."""
    if body.get("anthropic_version") not in accepted_versions():
        raise malformed("#: required key [anthropic_version] not found")
    for key in ("model", "stream"):
        if key in body:
            raise malformed(f"#: extraneous key [{key}] is not permitted")
    betas = _betas(body)
    if "tags" in body:
        raise validation("tags: Extra inputs are not permitted")
    for path, marker in iter_cache_controls(body):
        if isinstance(marker, dict) and "scope" in marker:
            raise validation(f"{path}.cache_control.scope: Extra inputs are not permitted")
    first_party: JSONObject = {"model": spec.id}
    first_party.update((k, v) for k, v in body.items() if k not in ("anthropic_version", "anthropic_beta"))
    if stream:
        first_party["stream"] = True
    try:
        validated = validate_body(first_party, "messages", config, betas)
    except ApiError as error:
        raise _translate(error) from None
    window = CONTEXT_1M if CONTEXT_1M_BETA in betas else spec.context_window
    if validated.prompt.total_tokens > window:
        raise validation(INPUT_TOO_LONG)
    return validated
