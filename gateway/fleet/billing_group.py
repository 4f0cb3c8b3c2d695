"""Which of the caller's groups pays for a request, from its ``tags`` (``GATEWAY_BILLING_GROUP_TAG``).

fleet-gateway.md s4: "Billing group: a request may carry "tags": {"<billing_group_tag>":
"<group>"}". The value is the client's word, so it is never trusted beyond the caller's own groups
(from the signed token): a group the caller belongs to is applied (only that group's pool is
checked and charged, and the request's telemetry carries that group's label); any other value, or
a value that is not a string, is ignored (the request is billed as an untagged one) and counted.
Claude Code 2.1.332's own gateway does the same (``billing_group`` / ``billing_group_ignored``).
``tags`` never reaches Bedrock or Vertex (``gateway.providers``: they reject it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from gateway.fleet.principal import Principal


class BillingGroups:
    def __init__(self, tag: str, counted: Callable[[str], None] | None = None) -> None:
        self.tag = tag
        self._counted = counted  # gateway_fleet_billing_group_tags_total{outcome}

    def group_of(self, principal: Principal, payload: Mapping[str, Any]) -> str | None:
        """The group the request's ``tags`` name, if the caller belongs to it; else ``None``."""
        tags = payload.get("tags")
        if not isinstance(tags, Mapping) or self.tag not in tags:
            return None
        named = tags[self.tag]
        if isinstance(named, str) and named in principal.groups:
            self._count("applied")
            return named
        self._count("ignored")
        return None

    def _count(self, outcome: str) -> None:
        if self._counted is not None:
            self._counted(outcome)
