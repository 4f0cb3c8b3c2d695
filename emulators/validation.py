"""Request validation with the real API's status codes, error types and messages.

Checks run in this order: authentication (401), ``anthropic-version`` (400), ``anthropic-beta``
(400), JSON body shape (400), model lookup (404). Body messages follow the real API's
pydantic-style wording: ``<path>: Field required``, ``<key>: Extra inputs are not permitted``,
``A maximum of 4 blocks with cache_control may be provided. Found N.``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal, TypeGuard

import orjson
from anthropic.types import message_count_tokens_params as _count_params
from anthropic.types import message_create_params as _create_params
from anthropic.types.beta import message_count_tokens_params as _beta_count_params
from anthropic.types.beta import message_create_params as _beta_create_params

from .betas import PER_TURN_CONTROL_BETA, first_unsupported, parse_beta_header
from .catalog import ModelSpec
from .config import EmulatorConfig
from .errors import ApiError, invalid_request
from .json_types import JSONObject
from .prompt import FlatPrompt, flatten_prompt, iter_cache_controls

Endpoint = Literal["messages", "count_tokens"]

MAX_CACHE_CONTROL_BLOCKS = 4
TTL_ORDER_MESSAGE = "{where}.ttl: a ttl='1h' must not come after a ttl='5m' cache_control block"
"""Wording reported by API users (the public docs only say longer TTLs must come first)."""
MIN_THINKING_BUDGET = 1024
_HEADER_ONLY_PARAMS = frozenset({"betas", "workspace_id", "user_profile_id"})


def _sdk_keys(*typed_dicts: Any) -> frozenset[str]:
    keys: set[str] = set()
    for td in typed_dicts:
        keys |= set(td.__required_keys__) | set(td.__optional_keys__)
    return frozenset(keys - _HEADER_ONLY_PARAMS)


MESSAGES_KEYS: frozenset[str] = frozenset(
    {
        "model",
        "messages",
        "system",
        "tools",
        "tool_choice",
        "metadata",
        "max_tokens",
        "thinking",
        "context_management",
        "output_config",
        "output_format",
        "stream",
        "temperature",
        "top_p",
        "top_k",
        "stop_sequences",
        "service_tier",
        "container",
        "mcp_servers",
        "cache_control",
        "diagnostics",
        "inference_geo",
        "tags",
        "speed",
    }
) | _sdk_keys(_create_params.MessageCreateParamsBase, _beta_create_params.MessageCreateParamsBase)
"""Top-level keys ``POST /v1/messages`` accepts: what real clients send plus the SDK's params."""

COUNT_TOKENS_KEYS: frozenset[str] = frozenset(
    {
        "model",
        "messages",
        "system",
        "tools",
        "tool_choice",
        "thinking",
        "context_management",
        "output_config",
        "output_format",
        "mcp_servers",
        "cache_control",
        "speed",
    }
) | _sdk_keys(_count_params.MessageCountTokensParams, _beta_count_params.MessageCountTokensParams)
"""Top-level keys ``POST /v1/messages/count_tokens`` accepts."""

_ROLES = ("user", "assistant", "system")
_CACHE_CONTROL_KEYS = frozenset({"type", "ttl", "scope"})
_THINKING_TYPES = ("enabled", "disabled", "adaptive")
_TOOL_CHOICE_TYPES = ("auto", "any", "tool", "none")


@dataclass(frozen=True, slots=True)
class ValidatedRequest:
    """A request body that passed validation, with what later stages need precomputed."""

    endpoint: Endpoint
    body: JSONObject
    model: ModelSpec
    prompt: FlatPrompt
    betas: tuple[str, ...]

    @property
    def stream(self) -> bool:
        return self.body.get("stream") is True


# --------------------------------------------------------------------------- headers


def check_auth(x_api_key: str | None, authorization: str | None, config: EmulatorConfig) -> None:
    """Accept a configured key in ``x-api-key`` or ``Authorization: Bearer``; else 401."""
    candidates: list[str] = []
    if x_api_key is not None:
        candidates.append(x_api_key.strip())
    if authorization is not None:
        scheme, _, token = authorization.strip().partition(" ")
        if scheme.lower() == "bearer":
            candidates.append(token.strip())
    if not candidates:
        raise ApiError(401, "x-api-key header is required")
    if not any(key in config.api_keys for key in candidates):
        raise ApiError(401, "invalid x-api-key")


def check_version(value: str | None, config: EmulatorConfig) -> None:
    """``anthropic-version`` must be present and one of the accepted versions."""
    if value is None or not value.strip():
        raise invalid_request("anthropic-version: header is required")
    if value.strip() not in config.api_versions:
        raise invalid_request(f"anthropic-version: invalid version string {value.strip()!r}")


def check_betas(values: Iterable[str], config: EmulatorConfig) -> tuple[str, ...]:
    """Parse ``anthropic-beta`` headers; reject unknown names unless checking is disabled."""
    names = parse_beta_header(values)
    if config.check_betas:
        unsupported = first_unsupported(names, config.allowed_betas)
        if unsupported is not None:
            raise invalid_request(f"Unsupported beta header: {unsupported}")
    return tuple(names)


# --------------------------------------------------------------------------- body


def parse_json_body(raw: bytes) -> JSONObject:
    """Decode the body; it must be a JSON object."""
    if not raw.strip():
        raise invalid_request("Request body is empty; expected a JSON object.")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise invalid_request(f"There was an error parsing the body of your request: {exc}") from None
    if not isinstance(body, dict):
        raise invalid_request("body: Input should be a valid dictionary")
    return body


def validate_body(
    body: JSONObject, endpoint: Endpoint, config: EmulatorConfig, betas: tuple[str, ...] = ()
) -> ValidatedRequest:
    """Validate a decoded ``messages`` / ``count_tokens`` body; raise :class:`ApiError` on failure."""
    allowed = MESSAGES_KEYS if endpoint == "messages" else COUNT_TOKENS_KEYS
    for key in body:
        if key not in allowed:
            raise invalid_request(f"{key}: Extra inputs are not permitted")
    required = ("model", "messages", "max_tokens") if endpoint == "messages" else ("model", "messages")
    for key in required:
        if key not in body:
            raise invalid_request(f"{key}: Field required")

    model_name = body["model"]
    if not isinstance(model_name, str):
        raise invalid_request("model: Input should be a valid string")
    _check_messages(body["messages"], PER_TURN_CONTROL_BETA in betas)
    _check_system(body.get("system"))
    _check_tools(body.get("tools"))
    _check_tool_choice(body.get("tool_choice"))
    if endpoint == "messages":
        _check_sampling(body)
    _check_thinking(body.get("thinking"), body.get("max_tokens") if endpoint == "messages" else None)
    prompt = _check_cache_controls(body, config)

    spec = config.catalog.resolve(model_name)
    if spec is None:
        raise ApiError(404, f"model: {model_name}")
    max_tokens = body.get("max_tokens")
    if endpoint == "messages" and _is_int(max_tokens) and max_tokens > spec.max_output_tokens:
        raise invalid_request(
            f"max_tokens: {body['max_tokens']} > {spec.max_output_tokens}, which is the maximum "
            f"allowed number of output tokens for {spec.id}"
        )
    return ValidatedRequest(endpoint, body, spec, prompt, betas)


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_messages(messages: Any, per_turn_control: bool) -> None:
    if not isinstance(messages, list):
        raise invalid_request("messages: Input should be a valid list")
    if not messages:
        raise invalid_request("messages: at least one message is required")
    allowed = ("role", "content", "output_config") if per_turn_control else ("role", "content")
    for m, message in enumerate(messages):
        if not isinstance(message, dict):
            raise invalid_request(f"messages.{m}: Input should be a valid dictionary")
        for key in message:
            if key not in allowed:
                raise invalid_request(f"messages.{m}.{key}: Extra inputs are not permitted")
        if "output_config" in message and not isinstance(message["output_config"], dict):
            raise invalid_request(f"messages.{m}.output_config: Input should be a valid dictionary")
        if "role" not in message:
            raise invalid_request(f"messages.{m}.role: Field required")
        if message["role"] not in _ROLES:
            raise invalid_request(f"messages.{m}.role: Input should be 'user', 'assistant' or 'system'")
        if "content" not in message:
            raise invalid_request(f"messages.{m}.content: Field required")
        _check_content(f"messages.{m}.content", message["content"])


def _check_content(path: str, content: Any) -> None:
    if isinstance(content, str):
        return
    if not isinstance(content, list):
        raise invalid_request(f"{path}: Input should be a valid string or a valid list")
    for i, block in enumerate(content):
        _check_block(f"{path}.{i}", block)


def _check_block(path: str, block: Any) -> None:
    if not isinstance(block, dict):
        raise invalid_request(f"{path}: Input should be a valid dictionary")
    kind = block.get("type")
    if not isinstance(kind, str):
        raise invalid_request(f"{path}.type: Field required")
    if kind == "text" and not isinstance(block.get("text"), str):
        raise invalid_request(f"{path}.text: Field required")
    if kind == "tool_use":
        for key in ("id", "name"):
            if not isinstance(block.get(key), str):
                raise invalid_request(f"{path}.{key}: Field required")
    if kind == "tool_result":
        if not isinstance(block.get("tool_use_id"), str):
            raise invalid_request(f"{path}.tool_use_id: Field required")
        nested = block.get("content")
        if nested is not None:
            _check_content(f"{path}.content", nested)


def _check_system(system: Any) -> None:
    if system is None or isinstance(system, str):
        return
    if not isinstance(system, list):
        raise invalid_request("system: Input should be a valid string or a valid list")
    for i, block in enumerate(system):
        if not isinstance(block, dict):
            raise invalid_request(f"system.{i}: Input should be a valid dictionary")
        if block.get("type") != "text":
            raise invalid_request(f"system.{i}.type: Input should be 'text'")
        if not isinstance(block.get("text"), str):
            raise invalid_request(f"system.{i}.text: Field required")


def _check_tools(tools: Any) -> None:
    if tools is None:
        return
    if not isinstance(tools, list):
        raise invalid_request("tools: Input should be a valid list")
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise invalid_request(f"tools.{i}: Input should be a valid dictionary")
        if not isinstance(tool.get("name"), str):
            raise invalid_request(f"tools.{i}.name: Field required")
        if tool.get("type") in (None, "custom") and not isinstance(tool.get("input_schema"), dict):
            raise invalid_request(f"tools.{i}.input_schema: Field required")


def _check_tool_choice(choice: Any) -> None:
    if choice is None:
        return
    if not isinstance(choice, dict) or choice.get("type") not in _TOOL_CHOICE_TYPES:
        raise invalid_request("tool_choice.type: Input should be 'auto', 'any', 'tool' or 'none'")
    if choice["type"] == "tool" and not isinstance(choice.get("name"), str):
        raise invalid_request("tool_choice.tool.name: Field required")


def _check_sampling(body: JSONObject) -> None:
    max_tokens = body["max_tokens"]
    if not _is_int(max_tokens):
        raise invalid_request("max_tokens: Input should be a valid integer")
    if max_tokens < 1:
        raise invalid_request("max_tokens: Input should be greater than or equal to 1")
    if "stream" in body and not isinstance(body["stream"], bool):
        raise invalid_request("stream: Input should be a valid boolean")
    stops = body.get("stop_sequences")
    if stops is not None and (not isinstance(stops, list) or not all(isinstance(s, str) for s in stops)):
        raise invalid_request("stop_sequences: Input should be a valid list of strings")
    for key, upper in (("temperature", 1.0), ("top_p", 1.0)):
        value = body.get(key)
        if value is None:
            continue
        if not _is_number(value):
            raise invalid_request(f"{key}: Input should be a valid number")
        if not 0.0 <= value <= upper:
            raise invalid_request(f"{key}: Input should be between 0 and {upper:g}")
    top_k = body.get("top_k")
    if top_k is not None and (not _is_int(top_k) or top_k < 0):
        raise invalid_request("top_k: Input should be a non-negative integer")


def _check_thinking(thinking: Any, max_tokens: Any) -> None:
    if thinking is None:
        return
    if not isinstance(thinking, dict) or thinking.get("type") not in _THINKING_TYPES:
        raise invalid_request("thinking.type: Input should be 'enabled', 'disabled' or 'adaptive'")
    if thinking["type"] != "enabled":
        return
    budget = thinking.get("budget_tokens")
    if not _is_int(budget):
        raise invalid_request("thinking.enabled.budget_tokens: Field required")
    if budget < MIN_THINKING_BUDGET:
        raise invalid_request(
            f"thinking.enabled.budget_tokens: Input should be greater than or equal to {MIN_THINKING_BUDGET}"
        )
    if _is_int(max_tokens) and max_tokens <= budget:
        raise invalid_request(
            "`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our documentation at "
            "https://docs.claude.com/en/docs/build-with-claude/extended-thinking#max-tokens-and-context-window-size"
        )


def _check_marker(path: str, value: Any) -> None:
    if not isinstance(value, dict):
        raise invalid_request(f"{path}: Input should be a valid dictionary")
    for key in value:
        if key not in _CACHE_CONTROL_KEYS:
            raise invalid_request(f"{path}.{key}: Extra inputs are not permitted")
    if value.get("type") != "ephemeral":
        raise invalid_request(f"{path}.type: Input should be 'ephemeral'")
    if "ttl" in value and value["ttl"] not in ("5m", "1h"):
        raise invalid_request(f"{path}.ttl: Input should be '5m' or '1h'")
    if "scope" in value and not isinstance(value["scope"], str):
        raise invalid_request(f"{path}.scope: Input should be a valid string")


def _check_cache_controls(body: JSONObject, config: EmulatorConfig) -> FlatPrompt:
    markers = list(iter_cache_controls(body))
    for path, value in markers:
        _check_marker(f"{path}.cache_control", value)
    if "cache_control" in body:
        _check_marker("cache_control", body["cache_control"])
    prompt = flatten_prompt(body)
    found = len(markers) + (1 if prompt.auto_marker else 0)
    if found > MAX_CACHE_CONTROL_BLOCKS:
        raise invalid_request(
            f"A maximum of {MAX_CACHE_CONTROL_BLOCKS} blocks with cache_control may be provided. "
            f"Found {found}."
        )
    if config.enforce_ttl_order:
        ordered = [(path, value.get("ttl", "5m")) for path, value in markers]
        if prompt.auto_marker:
            ordered.append(("cache_control", body["cache_control"].get("ttl", "5m")))
        seen_5m = False
        for path, ttl in ordered:
            if ttl == "1h" and seen_5m:
                where = path if path == "cache_control" else f"{path}.cache_control"
                raise invalid_request(
                    f"{where}.ttl: a ttl='1h' must not come after a ttl='5m' cache_control block"
                )
            seen_5m = seen_5m or ttl == "5m"
    return prompt
