"""Applying the per-provider beta table (:mod:`.shaping`) to one request.

An unsupported beta is dropped (logged and counted), not sent to fail the request; a dropped beta
takes its body field with it unless the table says otherwise. ``GATEWAY_BETA_POLICY`` replaces
the accepted sets per provider.

Details: docs/internals/gateway-providers.md
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from gateway.headers import ClientHeaders
from gateway.provider_names import ProviderName
from gateway.providers.shaping import (
    DEFAULT_PLACEMENT,
    TABLES,
    Placement,
    Row,
    default_accepted,
    rows_by_beta,
)

ALL: Final = "*"


Strip = Callable[[dict[str, Any]], bool]
"""Removes a body field from a payload's top level in place; nested values are never mutated
(what changes below the top level is replaced by a copy), so the client's payload can be shared."""


def _pop(key: str) -> Strip:
    def strip(payload: dict[str, Any]) -> bool:
        return payload.pop(key, None) is not None

    return strip


def _replace_blocks(
    blocks: list[Any], change: Callable[[dict[str, Any]], dict[str, Any] | None]
) -> list[Any] | None:
    """A copy of ``blocks`` with the ``cache_control`` blocks ``change`` rewrote, or ``None``."""
    out: list[Any] | None = None
    for index, block in enumerate(blocks):
        if isinstance(block, dict) and isinstance(block.get("cache_control"), dict):
            new = change(block)
            if new is not None:
                if out is None:
                    out = list(blocks)
                out[index] = new
    return out


def _rewrite_cache_controlled(
    payload: dict[str, Any], change: Callable[[dict[str, Any]], dict[str, Any] | None]
) -> bool:
    """Apply ``change`` to every block carrying ``cache_control`` (tools, system, message content),
    copying only the lists and messages on the way to a changed block."""
    changed = False
    for section in ("tools", "system"):
        items = payload.get(section)
        if isinstance(items, list) and (new := _replace_blocks(items, change)) is not None:
            payload[section] = new
            changed = True
    messages = payload.get("messages")
    if not isinstance(messages, list):
        return changed
    out: list[Any] | None = None
    for index, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list) and (blocks := _replace_blocks(content, change)) is not None:
            if out is None:
                out = list(messages)
            out[index] = {**message, "content": blocks}
    if out is not None:
        payload["messages"] = out
    return changed or out is not None


def _cache_control_key(key: str, only: object = None) -> Strip:
    """Remove ``key`` from every ``cache_control`` in tools, system and messages."""

    def without(block: dict[str, Any]) -> dict[str, Any] | None:
        control = block["cache_control"]
        if key not in control or (only is not None and control[key] != only):
            return None
        return {**block, "cache_control": {k: v for k, v in control.items() if k != key}}

    def strip(payload: dict[str, Any]) -> bool:
        return _rewrite_cache_controlled(payload, without)

    return strip


def _output_config_key(*keys: str) -> Strip:
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


def _message_key(key: str) -> Strip:
    """Remove ``key`` from every message (``output_config`` on Claude Code 2.1.332's messages)."""

    def strip(payload: dict[str, Any]) -> bool:
        messages = payload.get("messages")
        if not isinstance(messages, list):
            return False
        out: list[Any] | None = None
        for index, message in enumerate(messages):
            if isinstance(message, dict) and key in message:
                if out is None:
                    out = list(messages)
                out[index] = {k: v for k, v in message.items() if k != key}
        if out is None:
            return False
        payload["messages"] = out
        return True

    return strip


BODY_HALVES: Final[Mapping[str, Strip]] = {
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


def parse_beta_header(values: Iterable[str]) -> list[str]:
    """All ``anthropic-beta`` header values: split on commas, trimmed, de-duplicated, in order."""
    seen: dict[str, None] = {}
    for value in values:
        for item in value.split(","):
            name = item.strip()
            if name:
                seen[name] = None  # a repeat keeps its first position
    return list(seen)


@functools.lru_cache(maxsize=256)
def _parsed(value: str) -> tuple[str, ...]:
    return tuple(parse_beta_header((value,)))


def request_betas(headers: Iterable[tuple[str, str]]) -> tuple[str, ...]:
    """The betas of a request's ``anthropic-beta`` header(s). A client sends the same header on
    every request of a session, so one header's parse is remembered (a bounded cache)."""
    if isinstance(headers, ClientHeaders):  # found when the list was made
        values = headers.betas
    else:
        values = [value for name, value in headers if len(name) == 14 and name.lower() == "anthropic-beta"]
    if not values:
        return ()
    if len(values) == 1:
        return _parsed(values[0])
    return tuple(parse_beta_header(values))


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
    def from_settings(cls, overrides: Mapping[ProviderName, list[str]] | Mapping[str, list[str]]) -> BetaPolicy:
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

    def passes_all(self, provider: ProviderName) -> bool:
        """Every beta goes to ``provider`` as sent, its body fields untouched (the first-party
        surfaces without a ``GATEWAY_BETA_POLICY`` row)."""
        return self.accepted.get(provider) is None and provider not in TABLES

    def keeps(self, provider: ProviderName, beta: str, payload: Mapping[str, Any]) -> bool:
        """Whether :meth:`apply` keeps ``beta`` for this ``payload`` (possibly under another name)."""
        row = next((r for r in TABLES.get(provider, ()) if r.beta == beta), None)
        return self._keeps(row, beta, self.accepted.get(provider), payload)

    def apply(self, provider: ProviderName, betas: Sequence[str], payload: dict[str, Any]) -> BetaDecision:
        """Decide ``betas`` for ``provider``; strip dropped betas' body halves from ``payload``.

        Top-level keys of ``payload`` are changed in place (pass a shallow copy when the original
        must stay intact); nested values are replaced, never mutated.
        """
        decision = self.decide(provider, betas, payload)
        decision.body_changed = self.strip(provider, decision.dropped, payload)
        return decision

    def decide(
        self, provider: ProviderName, betas: Sequence[str], payload: Mapping[str, Any]
    ) -> BetaDecision:
        """Where each beta goes, and which are dropped; ``payload`` is only read."""
        accepted = self.accepted.get(provider)
        by_beta, order = _table(provider)
        if accepted is None and not by_beta:  # a first-party surface keeping every beta, as sent
            return BetaDecision(header=list(betas))
        decision = BetaDecision()
        kept: dict[str, Placement] = {}  # upstream name -> placement, first decision wins
        for beta in betas:
            row = by_beta.get(beta)
            if self._keeps(row, beta, accepted, payload):
                name = row.upstream_name if row is not None else beta
                kept.setdefault(name, _placement(provider, row))
            else:
                decision.dropped.append(beta)
        # a body half without its beta (the client sent the field but not the header) is left alone
        ranked = sorted(kept, key=lambda name: order.get(name, len(order)))  # stable: client order
        for name in ranked:
            placement = kept[name]
            if placement in (Placement.HEADER, Placement.BOTH):
                decision.header.append(name)
            if placement in (Placement.BODY, Placement.BOTH):
                decision.body.append(name)
        return decision

    def strips_body(self, provider: ProviderName, dropped: Iterable[str]) -> bool:
        """Whether dropping ``dropped`` may remove a body field (only then is a copy needed)."""
        return any(_body_half(provider, beta) is not None for beta in dropped)

    def strip(self, provider: ProviderName, dropped: Iterable[str], payload: dict[str, Any]) -> bool:
        """Remove the body halves of the ``dropped`` betas from ``payload`` (top level in place)."""
        changed = False
        for beta in dropped:
            half = _body_half(provider, beta)
            if half is not None and half(payload):
                changed = True
        return changed

    @staticmethod
    def _keeps(
        row: Row | None, beta: str, accepted: frozenset[str] | None, payload: Mapping[str, Any]
    ) -> bool:
        if accepted is None:
            return True
        if beta not in accepted and (row is None or row.upstream_name not in accepted):
            return False
        return row is None or row.only_if is None or row.only_if(payload)


@functools.cache
def _table(provider: ProviderName) -> tuple[Mapping[str, Row], Mapping[str, int]]:
    """The provider's rows by beta, and each upstream name's rank (the order kept betas are sent)."""
    rows = TABLES.get(provider, ())
    order: dict[str, int] = {}
    for index, each in enumerate(rows):
        order.setdefault(each.upstream_name, index)
    return rows_by_beta(provider), order


def _body_half(provider: ProviderName, beta: str) -> Strip | None:
    """How to strip ``beta``'s body field when it is dropped (``None``: the field stays)."""
    strip = BODY_HALVES.get(beta)
    if strip is None:
        return None
    row = _table(provider)[0].get(beta)
    return None if row is not None and row.keeps_body_field else strip


def _placement(provider: ProviderName, row: Row | None) -> Placement:
    if row is not None and row.placement is not None:
        return row.placement
    return DEFAULT_PLACEMENT.get(provider, Placement.HEADER)
