"""Structured output for a run: the final answer must validate against a pydantic model.

Native JSON outputs by default (``output_config.format``); pydantic still validates, and a failure
is retried at most ``output_retries`` times. Why not a forced final tool: the design document.

Details: docs/internals/loop.md
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

import orjson
from pydantic import BaseModel, ValidationError

from loop.messages import Block, JSONObject, Message, user_message
from loop.request import ModelRequest, SystemPrompt, system_blocks
from loop.state import LoopState
from loop.transitions import StructuredOutputInvalid, StructuredOutputRetry

ModelT = TypeVar("ModelT", bound=BaseModel)

_FENCED = re.compile(r"```(?:json)?\s*\n(.*?)\n?```", re.DOTALL)
SUPPORTED_STRING_FORMATS = frozenset(
    {"date-time", "time", "date", "duration", "email", "hostname", "uri", "ipv4", "ipv6", "uuid"}
)
"""String formats JSON outputs accept (Anthropic, "Structured outputs", JSON Schema limitations)."""
_UNSUPPORTED = (
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
    "minLength", "maxLength", "pattern", "maxItems", "uniqueItems", "minProperties", "maxProperties",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class OutputSpec(Generic[ModelT]):
    model: type[ModelT]
    retries: int = 2
    """Answers asked again after a validation failure (0: the first answer must validate)."""
    native: bool = True
    """Ask for JSON outputs (``output_config.format``); ``False``: state the schema in the system
    prompt and parse the text."""

    def __post_init__(self) -> None:
        if self.retries < 0:
            raise ValueError("output retries must be >= 0")

    def schema(self) -> JSONObject:
        return self.model.model_json_schema()


@dataclass(frozen=True, slots=True)
class OutputCheck:
    """What the final answer meant: the validated value, or the continuation / terminal."""

    value: BaseModel | None = None
    decision: StructuredOutputRetry | StructuredOutputInvalid | None = None


def final_text(content: Sequence[Block]) -> str:
    return "".join(str(b.get("text", "")) for b in content if b.get("type") == "text")


def extract_json(text: str) -> str:
    """The JSON part of an answer (see the module docstring); the text itself when none is found."""
    stripped = text.strip()
    try:
        orjson.loads(stripped)
        return stripped
    except orjson.JSONDecodeError:
        pass
    fenced = _FENCED.findall(stripped)
    if fenced:
        return str(fenced[-1]).strip()
    start, end = stripped.find("{"), stripped.rfind("}")
    return stripped[start : end + 1] if 0 <= start < end else stripped


def _errors(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}" for e in exc.errors(include_url=False)
    )


def check_output(state: LoopState, content: Sequence[Block], spec: OutputSpec[Any]) -> OutputCheck:
    """Validate a completed turn's answer; on failure the next rung (retry, or give up).

    Pure: the retries used so far are read from ``state.transitions``."""
    text = final_text(content)
    try:
        return OutputCheck(value=spec.model.model_validate_json(extract_json(text)))
    except ValidationError as exc:
        errors = _errors(exc)
    used = sum(isinstance(t, StructuredOutputRetry) for t in state.transitions)
    if used < spec.retries:
        return OutputCheck(decision=StructuredOutputRetry(attempt=used + 1, errors=errors))
    return OutputCheck(decision=StructuredOutputInvalid(attempts=used + 1, errors=errors))


def retry_message(errors: str) -> Message:
    """The feedback after an invalid answer (the schema is in the request: ``output_config`` or
    the system prompt)."""
    return user_message(
        "Your final answer does not match the required output format. Validation errors: "
        f"{errors}\nAnswer again with only the JSON value, corrected, and no other text."
    )


def instructions(spec: OutputSpec[Any]) -> str:
    schema = orjson.dumps(spec.schema()).decode()
    return (
        "When you have finished, give your final answer as a single JSON value matching this JSON "
        f"schema, with no other text: {schema}"
    )


def with_instructions(system: SystemPrompt, spec: OutputSpec[Any]) -> SystemPrompt:
    """The run's system prompt with the output instructions appended (``native=False`` only)."""
    if spec.native:
        return system
    blocks = system_blocks(system, cache=False)
    return [*blocks, {"type": "text", "text": instructions(spec)}]


def with_output_format(request: ModelRequest, spec: OutputSpec[Any]) -> ModelRequest:
    """``request`` asking for JSON outputs (``native``), other ``output_config`` fields kept."""
    if not spec.native:
        return request
    config = request.body.get("output_config")
    merged = {**(config if isinstance(config, dict) else {}), "format": output_format(spec.model)}
    return replace(request, body={**request.body, "output_config": merged})


def output_format(model: type[BaseModel]) -> JSONObject:
    return {"type": "json_schema", "schema": strict_schema(model.model_json_schema())}


def strict_schema(schema: Any) -> Any:
    """``schema`` in the subset JSON outputs accept: every object closed
    (``additionalProperties: false``), constraints the API does not support moved into the
    description (pydantic still enforces them), ``minItems`` only when 0 or 1, string formats only
    the supported ones."""
    if isinstance(schema, list):
        return [strict_schema(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    moved: dict[str, Any] = {}
    for key, value in schema.items():
        unsupported_format = key == "format" and value not in SUPPORTED_STRING_FORMATS
        if key in _UNSUPPORTED or (key == "minItems" and value not in (0, 1)) or unsupported_format:
            moved[key] = value
        elif key in ("properties", "$defs", "definitions"):
            out[key] = {name: strict_schema(sub) for name, sub in value.items()}
        elif key in ("items", "anyOf", "allOf", "oneOf", "prefixItems"):
            out["anyOf" if key == "oneOf" else key] = strict_schema(value)
        else:
            out[key] = value
    if out.get("type") == "object" or "properties" in out:
        out["additionalProperties"] = False
    if moved:
        note = ", ".join(f"{k}: {orjson.dumps(v).decode()}" for k, v in moved.items())
        out["description"] = (
            f"{out['description']}\n\n{{{note}}}" if out.get("description") else f"{{{note}}}"
        )
    return out
