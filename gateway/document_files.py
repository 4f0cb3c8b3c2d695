"""Operator-written YAML and JSON documents (the upstreams file, the policy file), read strictly.

A mapping key given twice is an error naming the key and its line: YAML and JSON loaders keep the
last one silently, which drops configuration without a word (two ``upstreams:`` lists, say). YAML
is read with the safe loader (no objects), the C one when PyYAML has it; merge keys (``<<``) still
override as YAML defines.
"""

from __future__ import annotations

import json
from typing import Any


class DuplicateKey(ValueError):
    """A mapping names one key twice; ``line`` is 1-based (``None`` when unknown: JSON)."""

    def __init__(self, key: object, line: int | None) -> None:
        self.key = key
        self.line = line
        where = f" at line {line}" if line is not None else ""
        super().__init__(f"duplicate key {str(key)[:64]!r}{where}")


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise DuplicateKey(key, None)
        found[key] = value
    return found


def load_json(text: str) -> Any:
    """``json.loads`` refusing duplicate keys (``DuplicateKey``; ``json.JSONDecodeError`` as usual)."""
    return json.loads(text, object_pairs_hook=_reject_duplicates)


def load_yaml(text: str) -> Any:
    """The safe YAML loader refusing duplicate keys (``DuplicateKey``; ``yaml.YAMLError`` as usual).
    Needs PyYAML (``ImportError`` without it)."""
    import yaml

    base: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class StrictLoader(base):  # type: ignore[misc]
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            if isinstance(node, yaml.MappingNode):
                seen: set[Any] = set()
                for key_node, _ in node.value:
                    if key_node.tag == "tag:yaml.org,2002:merge":
                        continue
                    key = self.construct_object(key_node, deep=True)
                    try:
                        if key in seen:
                            raise DuplicateKey(key, key_node.start_mark.line + 1)
                        seen.add(key)
                    except TypeError:  # an unhashable key: the loader's own error follows
                        break
            return super().construct_mapping(node, deep)

    return yaml.load(text, Loader=StrictLoader)
