"""The one call the app factory makes for fleet sign-in: :func:`register`.

It imports the sign-in modules (and authlib / joserfc, the ``fleet`` extra) only when
``GATEWAY_OIDC_ISSUER`` is set, so a gateway installed without the extra still starts.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from aiohttp import web

from gateway.config import Settings
from gateway.inbound import Authenticator


def register(
    app: web.Application,
    settings: Settings,
    auth: Authenticator,
    clock: Callable[[], float] = time.time,
    on_outcome: Callable[[str], None] | None = None,
    named_groups: Callable[[], frozenset[str]] | None = None,
) -> None:
    """Mount the sign-in routes and let ``auth`` accept sign-in tokens, when sign-in is on.
    ``on_outcome`` counts sign-in outcomes (``FleetMetrics.signed_in``); ``named_groups``: the
    groups the policy in force names (access tokens carry those, see ``gateway.fleet.token_groups``)."""
    if settings.signin.oidc_issuer is None:
        return
    from gateway.fleet import signin_routes
    from gateway.fleet.token_groups import TokenGroups

    tag = settings.signin.billing_group_tag is not None
    groups = TokenGroups(named_groups or frozenset, settings.telemetry.telemetry_groups, tag)
    signin_routes.mount(app, settings, auth, clock, on_outcome, groups)
