"""Applying the per-provider beta table (:mod:`.shaping`) to one request.

An unsupported beta sent to a cloud upstream is a 400 for the whole request; the gateway drops it
instead, with a logged and counted reason. Some betas come in two halves, a header value and a
body field (``context-management`` and ``context_management``, ``prompt-caching-scope`` and
``cache_control.scope``...). A dropped beta takes its body field with it unless the table says the
cloud takes that field without the beta (``ttl: "1h"`` on Bedrock and Vertex; role ``system``
messages, which only :mod:`.system_fold` removes, and only for a target configured to refuse them).

The default accepted sets are the table's (:func:`.shaping.default_accepted`; everything for the
first party and Foundry). ``GATEWAY_BETA_POLICY`` replaces them per provider, e.g.
``{"bedrock": ["interleaved-thinking-2025-05-14"], "vertex": ["*"]}`` (``"*"``: keep every beta).
A kept beta goes where its row says (Bedrock: header, body ``anthropic_beta`` or both; Vertex:
header), renamed when the cloud knows the feature by another name; an accepted beta without a row
goes in the body on Bedrock and in the header elsewhere. Kept betas are sent in table order, then
the others in the client's order, without duplicates.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from gateway.config import ProviderName
from gateway.providers.shaping import DEFAULT_PLACEMENT, TABLES, Placement, Row, default_accepted

ALL: Final = "*"


def _pop(key: str) -> Callable[[dict[str, Any]], bool]:
    def strip(payload: dict[str, Any]) -> bool:
        return payload.pop(key, None) is not None

    return strip


def _cache_control_key(key: str, only: object = None) -> Callable[[dict[str, Any]], bool]:
    """Remove ``key`` from every ``cache_control`` in tools, system and messages."""

    def strip(payload: dict[str, Any]) -> bool:
        changed = False
        for block in iter_cache_controlled(payload):
            control = block["cache_control"]
            if key in control and (only is None or control[key] == only):
                block["cache_control"] = {k: v for k, v in control.items() if k != key}
                changed = True
        return changed

    return strip


def _output_config_key(*keys: str) -> Callable[[dict[str, Any]], bool]:
    def strip(payload: dict[str, Any]) -> bool:
        changed = False
        config = payload.get("output_config")
        if isinstance(config, dict):
            for key in keys:
                if key in config:
                    config = {k: v for k, v in config.items() if k != key}
                    changed = True
            if changed:
                if config:
                    payload["output_config"] = config
                else:
                    del payload["output_config"]
        if "output_format" in keys and payload.pop("output_format", None) is not None:
            changed = True
        return changed

    return strip


def _message_key(key: str) -> Callable[[dict[str, Any]], bool]:
    """Remove ``key`` from every message (``output_config`` on Claude Code 2.1.332's messages)."""

    def strip(payload: dict[str, Any]) -> bool:
        messages = payload.get("messages")
        if not isinstance(messages, list):
            return False
        changed = False
        for index, message in enumerate(messages):
            if isinstance(message, dict) and key in message:
                messages[index] = {k: v for k, v in message.items() if k != key}
                changed = True
        return changed

    return strip


BODY_HALVES: Final[Mapping[str, Callable[[dict[str, Any]], bool]]] = {
    "context-management-2025-06-27": _pop("context_management"),
    "request-tags-2026-08-21": _pop("tags"),
    "prompt-caching-scope-2026-01-05": _cache_control_key("scope"),
    "extended-cache-ttl-2025-04-11": _cache_control_key("ttl", only="1h"),
    "effort-2025-11-24": _output_config_key("effort"),
    "structured-outputs-2025-12-15": _output_config_key("format", "output_format"),
    "structured-outputs-2025-11-13": _output_config_key("format", "output_format"),
    "per-turn-control-2026-07-01": _message_key("output_config"),
}
"""How to remove the body field that goes with a beta when the beta is dropped."""


def iter_cache_controlled(payload: Mapping[str, Any]) -> Iterable[dict[str, Any]]:
    """Every block (tool, system block, message content block) that carries ``cache_control``."""
    for section in ("tools", "system"):
        items = payload.get(section)
        if isinstance(items, list):
            for item in items:
                if isinstance(item, dict) and isinstance(item.get("cache_control"), dict):
                    yield item
    messages = payload.get("messages")
    if isinstance(messages, list):
        for message in messages:
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, list):
                for block in content:
                    if isinstance(block, dict) and isinstance(block.get("cache_control"), dict):
                        yield block


def parse_beta_header(values: Iterable[str]) -> list[str]:
    """All ``anthropic-beta`` header values: split on commas, trimmed, de-duplicated, in order."""
    seen: dict[str, None] = {}
    for value in values:
        for item in value.split(","):
            name = item.strip()
            if name:
                seen.setdefault(name, None)
    return list(seen)


@dataclass(slots=True)
class BetaDecision:
    """Where each of a request's betas goes upstream."""

    header: list[str] = field(default_factory=list)  # the ``anthropic-beta`` header
    body: list[str] = field(default_factory=list)  # Bedrock's body ``anthropic_beta``
    dropped: list[str] = field(default_factory=list)  # client names
    body_changed: bool = False

    @property
    def kept(self) -> list[str]:
        """Every beta sent, header first (each name once)."""
        return list(dict.fromkeys([*self.header, *self.body]))


@dataclass(frozen=True, slots=True)
class BetaPolicy:
    """The accepted betas per provider (``None``: all) and the shaping table."""

    accepted: Mapping[ProviderName, frozenset[str] | None]

    @classmethod
    def from_settings(cls, overrides: Mapping[str, list[str]]) -> BetaPolicy:
        accepted = {provider: default_accepted(provider) for provider in ProviderName}
        for name, betas in overrides.items():
            accepted[ProviderName(name)] = None if ALL in betas else frozenset(betas)
        return cls(accepted)

    def known_betas(self) -> frozenset[str]:
        """Every beta named by the table or the policy (the dropped-betas metric's label set)."""
        names: set[str] = set(BODY_HALVES)
        for rows in TABLES.values():
            names.update(row.beta for row in rows)
        for betas in self.accepted.values():
            if betas is not None:
                names |= betas
        return frozenset(names)

    def keeps(self, provider: ProviderName, beta: str, payload: Mapping[str, Any]) -> bool:
        """Whether :meth:`apply` keeps ``beta`` for this ``payload`` (possibly under another name)."""
        row = next((r for r in TABLES.get(provider, ()) if r.beta == beta), None)
        return self._keeps(row, beta, self.accepted.get(provider), payload)

    def apply(self, provider: ProviderName, betas: list[str], payload: dict[str, Any]) -> BetaDecision:
        """Decide ``betas`` for ``provider``; strip dropped betas' body halves from ``payload``.

        ``payload`` is modified in place (pass a copy when the original must stay intact).
        """
        accepted = self.accepted.get(provider)
        rows = TABLES.get(provider, ())
        by_beta = {row.beta: row for row in rows}
        order: dict[str, int] = {}
        for index, each in enumerate(rows):
            order.setdefault(each.upstream_name, index)
        decision = BetaDecision()
        kept: dict[str, Placement] = {}  # upstream name -> placement, first decision wins
        for beta in betas:
            row = by_beta.get(beta)
            if self._keeps(row, beta, accepted, payload):
                name = row.upstream_name if row is not None else beta
                placement = _placement(provider, row)
                kept.setdefault(name, placement)
                continue
            decision.dropped.append(beta)
            strip = BODY_HALVES.get(beta)
            if strip is not None and not (row is not None and row.keeps_body_field) and strip(payload):
                decision.body_changed = True
        # a body half without its beta (the client sent the field but not the header) is left alone
        ranked = sorted(kept, key=lambda name: order.get(name, len(order)))  # stable: client order
        for name in ranked:
            placement = kept[name]
            if placement in (Placement.HEADER, Placement.BOTH):
                decision.header.append(name)
            if placement in (Placement.BODY, Placement.BOTH):
                decision.body.append(name)
        return decision

    @staticmethod
    def _keeps(
        row: Row | None, beta: str, accepted: frozenset[str] | None, payload: Mapping[str, Any]
    ) -> bool:
        if accepted is None:
            return True
        if beta not in accepted and (row is None or row.upstream_name not in accepted):
            return False
        return row is None or row.only_if is None or row.only_if(payload)


def _placement(provider: ProviderName, row: Row | None) -> Placement:
    if row is not None and row.placement is not None:
        return row.placement
    return DEFAULT_PLACEMENT.get(provider, Placement.HEADER)
