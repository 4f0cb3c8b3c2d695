"""Which ``anthropic-beta`` values each upstream accepts, and how to drop the others cleanly.

An unsupported beta sent to a cloud upstream is a 400 for the whole request; the gateway drops it
instead, with a logged and counted reason. Some betas come in two halves, a header value and a
body field (``context-management`` and ``context_management``, ``extended-cache-ttl`` and
``ttl: "1h"``...). Such a beta keeps both halves or neither: when it is dropped, its body field is
removed too; when its body field cannot be removed without changing the conversation (role
``system`` messages of ``mid-conversation-system``), the beta is kept and the upstream decides.

Default policy (the providers' published beta lists as of 2026-11; override per provider with
``GATEWAY_BETA_POLICY``, e.g. ``{"bedrock": ["interleaved-thinking-2025-05-14"], "vertex": ["*"]}``):

* ``anthropic``, ``foundry``: every beta is forwarded (the first-party surface).
* ``bedrock`` and ``vertex``: the allowlists below. Neither accepts ``request-tags-2026-08-21``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from gateway.config import ProviderName

ALL: Final = "*"

_COMMON_CLOUD: Final = frozenset(
    {
        "interleaved-thinking-2025-05-14",
        "context-1m-2025-08-07",
        "context-management-2025-06-27",
        "token-efficient-tools-2025-02-19",
        "output-128k-2025-02-19",
        "fine-grained-tool-streaming-2025-05-14",
        "computer-use-2024-10-22",
        "computer-use-2025-01-24",
        "computer-use-2025-11-24",
        "tool-search-tool-2025-10-19",
        "tool-examples-2025-10-29",
        "effort-2025-11-24",
        "extended-cache-ttl-2025-04-11",
        "dev-full-thinking-2025-05-14",
    }
)

DEFAULT_POLICY: Final[Mapping[ProviderName, frozenset[str] | None]] = {
    ProviderName.ANTHROPIC: None,
    ProviderName.FOUNDRY: None,
    ProviderName.BEDROCK: _COMMON_CLOUD,
    ProviderName.VERTEX: _COMMON_CLOUD
    | frozenset({"claude-code-20250219", "web-search-2025-03-05", "prompt-caching-2024-07-31"}),
}


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


def _has_system_messages(payload: dict[str, Any]) -> bool:
    messages = payload.get("messages")
    return isinstance(messages, list) and any(
        isinstance(m, dict) and m.get("role") == "system" for m in messages
    )


@dataclass(frozen=True, slots=True)
class BodyHalf:
    """The body field that goes with a beta: how to remove it, or how to tell it cannot be."""

    strip: Callable[[dict[str, Any]], bool] | None = None
    required_by: Callable[[dict[str, Any]], bool] | None = None


BODY_HALVES: Final[Mapping[str, BodyHalf]] = {
    "context-management-2025-06-27": BodyHalf(strip=_pop("context_management")),
    "request-tags-2026-08-21": BodyHalf(strip=_pop("tags")),
    "prompt-caching-scope-2026-01-05": BodyHalf(strip=_cache_control_key("scope")),
    "extended-cache-ttl-2025-04-11": BodyHalf(strip=_cache_control_key("ttl", only="1h")),
    "effort-2025-11-24": BodyHalf(strip=_output_config_key("effort")),
    "structured-outputs-2025-12-15": BodyHalf(strip=_output_config_key("format", "output_format")),
    "mid-conversation-system-2026-04-07": BodyHalf(required_by=_has_system_messages),
}


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
    kept: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    kept_for_body: list[str] = field(default_factory=list)
    body_changed: bool = False


@dataclass(frozen=True, slots=True)
class BetaPolicy:
    """The accepted betas per provider (``None``: all)."""

    accepted: Mapping[ProviderName, frozenset[str] | None]

    @classmethod
    def from_settings(cls, overrides: Mapping[str, list[str]]) -> BetaPolicy:
        accepted = dict(DEFAULT_POLICY)
        for name, betas in overrides.items():
            provider = ProviderName(name)
            accepted[provider] = None if ALL in betas else frozenset(betas)
        return cls(accepted)

    def known_betas(self) -> frozenset[str]:
        """Every beta named by the policy (the bounded label set for the dropped-betas metric)."""
        names: set[str] = set(BODY_HALVES)
        for betas in self.accepted.values():
            if betas is not None:
                names |= betas
        return frozenset(names)

    def apply(self, provider: ProviderName, betas: list[str], payload: dict[str, Any]) -> BetaDecision:
        """Split ``betas`` into kept and dropped for ``provider``; strip dropped betas' body halves.

        ``payload`` is modified in place (pass a copy when the original must stay intact).
        """
        decision = BetaDecision()
        accepted = self.accepted.get(provider)
        for beta in betas:
            if accepted is None or beta in accepted:
                decision.kept.append(beta)
                continue
            half = BODY_HALVES.get(beta)
            if half is not None and half.required_by is not None and half.required_by(payload):
                decision.kept.append(beta)
                decision.kept_for_body.append(beta)
                continue
            decision.dropped.append(beta)
            if half is not None and half.strip is not None and half.strip(payload):
                decision.body_changed = True
        # a body half without its beta (the client sent the field but not the header) is left alone
        return decision
