"""The policy's own endpoints, and the ``/v1/models`` filter.

``GET /managed/settings`` (:mod:`gateway.fleet.managed_settings`), ``GET /api/oauth/usage``
(``cache-control: no-store``; the caller's caps, or its own spend when uncapped) and the admin API
(:mod:`gateway.fleet.admin_api`). They are served with or without a policy file (the default
policy: no settings, so ``/managed/settings`` is ``404``; no caps, and the admin API's ``PUT``
is ``409``: nothing would enforce the cap). ``filter_models`` keeps the
``data`` entries of a ``/v1/models`` page the caller may use.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
from aiohttp import web

from gateway.errors import GatewayError
from gateway.fleet import managed_settings
from gateway.fleet.admin_api import AdminApi
from gateway.fleet.counters import CountersUnavailable
from gateway.fleet.model_rules import ModelRules
from gateway.fleet.policy_gate import PolicyGate
from gateway.fleet.principal import Principal

PrincipalOf = Callable[[web.Request], Principal]


def filter_models(body: bytes, rules: ModelRules) -> bytes | None:
    """The page with only the permitted ``data`` entries (``None``: not a page we can read)."""
    try:
        page = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(page, dict) or not isinstance(page.get("data"), list):
        return None
    kept = [
        item for item in page["data"] if not isinstance(item, dict) or rules.permits(str(item.get("id", "")))
    ]
    page["data"] = kept
    if "first_id" in page:
        page["first_id"] = kept[0].get("id") if kept and isinstance(kept[0], dict) else None
    if "last_id" in page:
        page["last_id"] = kept[-1].get("id") if kept and isinstance(kept[-1], dict) else None
    return orjson.dumps(page)


class FleetRoutes:
    def __init__(self, gate: PolicyGate, principal_for: PrincipalOf, admin_for: Any, enforced: bool = True) -> None:
        self.gate = gate
        self._principal_for = principal_for
        self.admin = AdminApi(gate, admin_for, enforced)

    async def managed_settings(self, request: web.Request) -> web.Response:
        principal = self._principal_for(request)
        effective = self.gate.effective(principal)
        self.gate.settings_served(principal, effective)  # what a client loads: the hint's history
        return managed_settings.answer(effective, request.headers.get("if-none-match"))

    async def usage(self, request: web.Request) -> web.Response:
        principal = self._principal_for(request)
        try:
            body = await self.gate.usage(principal)
        except CountersUnavailable:
            raise GatewayError(
                503, "spend limit unavailable: the spend counters cannot be read right now"
            ) from None
        return web.json_response(body, headers={"cache-control": "no-store"})

    def add_to(self, app: web.Application) -> None:
        app.router.add_get("/managed/settings", self.managed_settings)
        app.router.add_get("/api/oauth/usage", self.usage)
        app.router.add_get("/v1/organizations/spend_limits", self.admin.get_limits)
        app.router.add_put("/v1/organizations/spend_limits", self.admin.put_limit)
