"""Deterministic example values for a JSON Schema (tool inputs, structured outputs).

Only what a model would have to fill in is generated: for objects, the ``required`` properties
(all properties when ``required`` is absent and there are at most three of them). Values prefer
``const``, then ``default``, then the first ``enum`` / ``examples`` entry, then a type-based
placeholder (``"<name> example"`` for strings, the minimum or 1 for numbers, ``true``, ``[]``).
"""

from __future__ import annotations

from typing import Any

_MAX_DEPTH = 8
_SMALL_OBJECT = 3


def example_value(schema: Any, name: str = "value", depth: int = 0) -> Any:
    """An example instance of ``schema``; ``name`` is the property it is for."""
    if not isinstance(schema, dict) or depth > _MAX_DEPTH:
        return f"{name} example"
    for key in ("const", "default"):
        if key in schema:
            return schema[key]
    for key in ("enum", "examples"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            return options[0]
    for key in ("anyOf", "oneOf", "allOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            return example_value(options[0], name, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind is None:
        kind = "object" if "properties" in schema else "string"
    return _typed_value(kind, schema, name, depth)


def _typed_value(kind: Any, schema: dict[str, Any], name: str, depth: int) -> Any:
    if kind == "object":
        return example_object(schema, depth)
    if kind == "array":
        count = schema.get("minItems", 0)
        count = count if isinstance(count, int) and not isinstance(count, bool) else 0
        return [example_value(schema.get("items"), name, depth + 1) for _ in range(min(count, 3))]
    if kind in ("integer", "number"):
        minimum, exclusive = schema.get("minimum"), schema.get("exclusiveMinimum")
        value: float = 1
        if isinstance(minimum, int | float) and not isinstance(minimum, bool):
            value = minimum
        elif isinstance(exclusive, int | float) and not isinstance(exclusive, bool):
            value = exclusive + 1
        return int(value) if kind == "integer" else float(value)
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    return f"{name} example"


def example_object(schema: dict[str, Any], depth: int = 0) -> dict[str, Any]:
    """An example object for an object schema (its required properties)."""
    properties = schema.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    required = schema.get("required")
    if isinstance(required, list):
        names = [n for n in required if isinstance(n, str)]
    else:
        names = list(properties)[:_SMALL_OBJECT] if len(properties) <= _SMALL_OBJECT else []
    return {n: example_value(properties.get(n), n, depth + 1) for n in names}
