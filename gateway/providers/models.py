"""The model catalogue: first-party ids the gateway knows, for listings and bounded metric labels.

Cloud id mapping (Bedrock, Vertex) extends this table with its provider issue.
"""

from __future__ import annotations

from typing import Final

# (alias, dated id or None, display name)
FIRST_PARTY_MODELS: Final[tuple[tuple[str, str | None, str], ...]] = (
    ("claude-opus-4-8", None, "Claude Opus 4.8"),
    ("claude-opus-4-7", None, "Claude Opus 4.7"),
    ("claude-opus-4-6", None, "Claude Opus 4.6"),
    ("claude-sonnet-4-6", None, "Claude Sonnet 4.6"),
    ("claude-opus-4-5", "claude-opus-4-5-20251101", "Claude Opus 4.5"),
    ("claude-haiku-4-5", "claude-haiku-4-5-20251001", "Claude Haiku 4.5"),
    ("claude-sonnet-4-5", "claude-sonnet-4-5-20250929", "Claude Sonnet 4.5"),
    ("claude-opus-4-1", "claude-opus-4-1-20250805", "Claude Opus 4.1"),
    ("claude-opus-4-0", "claude-opus-4-20250514", "Claude Opus 4"),
    ("claude-sonnet-4-0", "claude-sonnet-4-20250514", "Claude Sonnet 4"),
    ("claude-3-7-sonnet-latest", "claude-3-7-sonnet-20250219", "Claude Sonnet 3.7"),
    ("claude-3-5-haiku-latest", "claude-3-5-haiku-20241022", "Claude Haiku 3.5"),
)

_LABELS: Final[dict[str, str]] = {}
for _alias, _dated, _ in FIRST_PARTY_MODELS:
    _LABELS[_alias] = _alias
    if _dated is not None:
        _LABELS[_dated] = _alias

OTHER: Final = "other"


def metric_label(model: str) -> str:
    """A bounded label for ``model``: its catalogue alias, or ``other``.

    A ``[1m]``-style suffix some clients display is ignored.
    """
    base = model.split("[", 1)[0]
    return _LABELS.get(base, OTHER)
