"""Anthropic-style model ids and how each cloud names them: the pattern half of the catalogue.

Patterns come from what Claude Code sends in its own Bedrock/Vertex modes and the published
catalogues (providers.md section 7); ids without a pattern get a 404 unless
``GATEWAY_MODEL_MAP`` maps them.

Details: docs/internals/gateway-providers.md
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

BEDROCK_GEOGRAPHIES: Final = ("us", "eu", "apac", "jp", "au", "ca", "us-gov", "global")
"""Cross-region inference-profile prefixes (``us.anthropic....``)."""

_VERSION: Final = r"\d{1,2}(?:-\d{1,2})?"
_UNDATED: Final = re.compile(rf"^claude-(?P<family>[a-z]+)-(?P<version>{_VERSION})$")
_DATED: Final = re.compile(rf"^(?P<name>claude-(?:[a-z]+-{_VERSION}|{_VERSION}-[a-z]+))-(?P<date>20\d{{6}})$")
_OLD_STYLE: Final = re.compile(rf"^claude-(?P<version>{_VERSION})-(?P<family>[a-z]+)$")
_BEDROCK_VERSION_SUFFIX: Final = re.compile(r"-v\d+(?::\d+)?$")


@dataclass(frozen=True, slots=True)
class ParsedId:
    """An Anthropic-style id: its name (without date) and its date, if dated."""

    name: str
    date: str | None


def base_name(model: str) -> str:
    """The id without a ``[1m]``-style suffix."""
    return model.split("[", 1)[0]


def parse(model: str) -> ParsedId | None:
    """The parts of an Anthropic-style id, or ``None`` when ``model`` has no cloud pattern."""
    model = base_name(model)
    dated = _DATED.match(model)
    if dated is not None:
        return ParsedId(dated.group("name"), dated.group("date"))
    if _UNDATED.match(model):
        return ParsedId(model, None)
    return None


def bedrock_base_id(model: str) -> str | None:
    """The Bedrock base model id (before any geography prefix) by the naming pattern."""
    parsed = parse(model)
    if parsed is None:
        return None
    if parsed.date is None:
        return f"anthropic.{parsed.name}"
    return f"anthropic.{parsed.name}-{parsed.date}-v1:0"


def vertex_id(model: str) -> str | None:
    """The Vertex AI model id by the naming pattern."""
    parsed = parse(model)
    if parsed is None:
        return None
    return parsed.name if parsed.date is None else f"{parsed.name}@{parsed.date}"


def strip_geography(model: str) -> str:
    """A Bedrock id without its inference-profile prefix (``us.anthropic.x`` -> ``anthropic.x``)."""
    head, dot, rest = model.partition(".")
    return rest if dot and head in BEDROCK_GEOGRAPHIES else model


def client_id_from_bedrock(native: str) -> str | None:
    """The Anthropic-style id a Bedrock base or profile id serves (``None``: not one of ours)."""
    base = strip_geography(native)
    if not base.startswith("anthropic."):
        return None
    candidate = _BEDROCK_VERSION_SUFFIX.sub("", base.removeprefix("anthropic."))
    return candidate if parse(candidate) is not None else None


def client_id_from_vertex(native: str) -> str | None:
    """The Anthropic-style id a Vertex model id serves (``name@date`` -> ``name-date``)."""
    name, at, date = native.partition("@")
    candidate = f"{name}-{date}" if at else name
    return candidate if parse(candidate) is not None else None


def display_name(model: str) -> str:
    """``Claude Opus 5.5`` for ``claude-opus-5-5`` (dated ids: their name); else the id itself."""
    parsed = parse(model)
    if parsed is None:
        return model
    match = _UNDATED.match(parsed.name) or _OLD_STYLE.match(parsed.name)
    if match is None:
        return model
    version = match.group("version").replace("-", ".")
    return f"Claude {match.group('family').capitalize()} {version}"
