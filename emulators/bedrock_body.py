"""InvokeModel body validation with Bedrock's wording, on top of the first-party rules.

Bedrock-specific checks, in order (each a 400 ``ValidationException``):

* ``anthropic_version`` missing or not accepted (``bedrock-2023-05-31`` or the installed SDK's
  ``ANTHROPIC_API_VERSION``, read at runtime): ``Malformed input request: #: required key
  [anthropic_version] not found, please reformat your input and try again.``;
* a ``model`` or ``stream`` key: ``#: extraneous key [model] is not permitted`` (same frame);
* ``anthropic_beta`` not a list of strings: ``#/anthropic_beta: expected type: JSONArray, found:
  String`` / ``#/anthropic_beta/0: expected type: String, found: Integer``;
* a beta outside Bedrock's lists, in the body or in the ``anthropic-beta`` header
  (:mod:`.cloud_betas`: the AWS guide's list and Claude Code's own Bedrock-mode traffic):
  ``invalid beta flag``;
* body fields Bedrock rejects: top-level ``tags`` (providers.md s10), ``cache_control.scope``
  (first-party only: fixtures README 1.6), ``context_management`` unless its beta is in the body
  list and every edit is ``clear_tool_uses_20250919`` (:func:`.cloud_betas.bedrock_context_edits_ok`):
  ``<path>: Extra inputs are not permitted``. A message's ``output_config`` (first-party
  ``per-turn-control``, which Bedrock does not offer) gets the same answer from the shared rules.

Then the first-party rules (:func:`~emulators.validation.validate_body`: ``max_tokens``,
``messages``, at most 4 ``cache_control`` blocks, ``ttl``, thinking budget...), their messages
relayed as Bedrock relays the model's, except missing/unknown top-level keys, which get the
schema wording above. Finally a prompt longer than the model's context window (1M with
``context-1m-2025-08-07``) is ``Input is too long.``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import orjson

from .bedrock_exceptions import INPUT_TOO_LONG, malformed, validation
from .betas import parse_beta_header
from .catalog import ModelSpec
from .cloud_betas import BEDROCK_BODY_BETAS, BEDROCK_HEADER_BETAS, bedrock_context_edits_ok, first_outside
from .config import EmulatorConfig
from .errors import ApiError
from .json_types import JSONObject
from .prompt import iter_cache_controls
from .validation import ValidatedRequest, validate_body
from .versions import BEDROCK_VERSION, accepted
from .window import context_window

_TOP_LEVEL = re.compile(r"^(\w+): (Field required|Extra inputs are not permitted)$")


def accepted_versions() -> frozenset[str]:
    return accepted(BEDROCK_VERSION)


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


def _body_betas(body: JSONObject) -> list[str]:
    value = body.get("anthropic_beta", [])
    if not isinstance(value, list):
        raise malformed(f"#/anthropic_beta: expected type: JSONArray, found: {_json_type(value)}")
    for index, item in enumerate(value):
        if not isinstance(item, str):
            raise malformed(f"#/anthropic_beta/{index}: expected type: String, found: {_json_type(item)}")
    return value


def _betas(body: JSONObject, header_values: Iterable[str], check: bool) -> tuple[str, ...]:
    """The body and header betas (body first, each once); unknown ones: ``invalid beta flag``."""
    body_betas = _body_betas(body)
    header_betas = parse_beta_header(header_values)
    if check and (
        first_outside(body_betas, BEDROCK_BODY_BETAS) is not None
        or first_outside(header_betas, BEDROCK_HEADER_BETAS) is not None
    ):
        raise validation("invalid beta flag")
    return tuple(dict.fromkeys([*body_betas, *header_betas]))


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
    body: JSONObject,
    spec: ModelSpec,
    config: EmulatorConfig,
    *,
    stream: bool,
    header_betas: Iterable[str] = (),
) -> ValidatedRequest:
    """Validate an InvokeModel body (and the request's ``anthropic-beta`` header values) for
    ``spec``; raise ``BedrockError`` (or ``ApiError``)."""
    if body.get("anthropic_version") not in accepted_versions():
        raise malformed("#: required key [anthropic_version] not found")
    for key in ("model", "stream"):
        if key in body:
            raise malformed(f"#: extraneous key [{key}] is not permitted")
    betas = _betas(body, header_betas, config.check_betas)
    if "tags" in body:
        raise validation("tags: Extra inputs are not permitted")
    if "context_management" in body and not bedrock_context_edits_ok(
        body["context_management"], _body_betas(body)
    ):
        raise validation("context_management: Extra inputs are not permitted")
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
    if validated.prompt.total_tokens > context_window(spec, betas):
        raise validation(INPUT_TOO_LONG)
    return validated
