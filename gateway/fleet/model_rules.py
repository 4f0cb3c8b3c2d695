"""Model allow/deny rules of a policy entry, and the model tiers the kill switch turns off.

A pattern matches a model when it is a tier word (``opus``, ``sonnet``, ``haiku``: every model of
that family, whatever its id form) or when it matches, as an ``fnmatch`` pattern (``*``, ``?``,
``[...]``, case-sensitive), any name of the requested model: the name as sent, without a ``[1m]``
suffix, and its catalogue alias (so ``claude-sonnet-4-5`` also matches the dated
``claude-sonnet-4-5-20250929`` and the Bedrock/Vertex ids of that model). Deny wins over allow.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from gateway.providers.model_patterns import base_name
from gateway.providers.models import OTHER, metric_label

TIERS: Final = ("opus", "sonnet", "haiku")
_TOKENS: Final = re.compile(r"[a-z0-9]+")
MAX_SHOWN: Final = 100  # a refusal names the model, cut to this many characters
MAX_ANSWERS: Final = 1024


def tier_of(model: str) -> str | None:
    """The model's family (``opus``/``sonnet``/``haiku``) from its id's words, or ``None``."""
    words = _TOKENS.findall(model.lower())
    for tier in TIERS:
        if tier in words:
            return tier
    return None


def names_of(model: str) -> tuple[str, ...]:
    """Every name a pattern is matched against: as sent, without ``[1m]``, the catalogue alias."""
    names = [model]
    base = base_name(model)
    if base != model:
        names.append(base)
    label = metric_label(model)
    if label != OTHER and label not in names:
        names.append(label)
    return tuple(names)


def matches(pattern: str, model: str) -> bool:
    if pattern.lower() in TIERS:
        return tier_of(model) == pattern.lower()
    return any(fnmatch.fnmatchcase(name, pattern) for name in names_of(model))


@dataclass(frozen=True, slots=True)
class ModelRules:
    """``allow`` (``None``: every model) minus ``deny``; ``killed`` tiers are off for everyone."""

    allow: tuple[str, ...] | None = None
    deny: tuple[str, ...] = ()
    killed: frozenset[str] = frozenset()
    # the answer per model name, found once (a fleet uses few names; bounded all the same)
    _answers: dict[str, str | None] = field(default_factory=dict, compare=False, repr=False)

    @property
    def unrestricted(self) -> bool:
        return self.allow is None and not self.deny and not self.killed

    def refusal(self, model: str) -> str | None:
        """Why ``model`` may not be used (a sentence naming it), or ``None`` when it may."""
        answers = self._answers
        if model in answers:
            return answers[model]
        answer = self._refusal(model)
        if len(answers) >= MAX_ANSWERS:
            answers.clear()
        answers[model] = answer
        return answer

    def _refusal(self, model: str) -> str | None:
        tier = tier_of(model)
        shown = model if len(model) <= MAX_SHOWN else model[:MAX_SHOWN] + "..."
        if tier is not None and tier in self.killed:
            return f"model {shown!r} is not available: {tier} models are switched off on this gateway"
        if any(matches(pattern, model) for pattern in self.deny) or (
            self.allow is not None and not any(matches(pattern, model) for pattern in self.allow)
        ):
            return f"model {shown!r} is not allowed for you by this gateway's policy"
        return None

    def permits(self, model: str) -> bool:
        return self.refusal(model) is None

    def filter_ids(self, ids: Iterable[str]) -> list[str]:
        return [model for model in ids if self.permits(model)]
