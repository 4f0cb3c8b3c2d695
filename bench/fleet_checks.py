"""What proves the fleet-overhead bench measured what it says (:mod:`bench.fleet_overhead`).

Run after the load, against both gateways: the sign-in gateway never contacted its IdP (discovery
is lazy); the static-key gateway refuses a sign-in bearer (so it measured static keys only); on the
sign-in gateway a bearer's request carries the spend-cap headers, a model outside the allow rule
is refused, the user's group gets its managed settings, every dollar of the load's cost was
counted for signed-in callers (``gateway_cost_usd_total{team="signed_in"}``) and charged to the
group pool and to a listed user's own counter (the admin API's ``spent_usd``). Each check is a
:class:`Check` with what was seen; the bench fails when one does not hold.
"""

from __future__ import annotations

import http.client
import math
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import orjson
from prometheus_client.parser import text_string_to_metric_families

from bench import payloads
from bench.fleet_setup import DENIED_MODEL, GROUP, FleetConfig, IdpSentinel, user_subject
from gateway.fleet.principal import SIGNED_IN_LABEL

METRICS_KEY = "bench-metrics-key"
COST_METRIC = "gateway_cost_usd"  # the family name of gateway_cost_usd_total
UNIFIED_STATUS = "anthropic-ratelimit-unified-status"
POOL_TOLERANCE = 0.01  # relative: the pool keeps micro-USD per request, the metric a float sum


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    seen: str


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return orjson.loads(self.body)


def call(base_url: str, method: str, path: str, headers: dict[str, str], body: bytes | None = None) -> Answer:
    parts = urlsplit(base_url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=15)
    try:
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        return Answer(resp.status, {k.lower(): v for k, v in resp.getheaders()}, data)
    finally:
        conn.close()


def _bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}", "anthropic-version": "2023-06-01"}


def _message(base_url: str, headers: dict[str, str], model: str = payloads.MODEL) -> Answer:
    body = orjson.loads(payloads.request_body(False))
    body["model"] = model
    return call(
        base_url, "POST", "/v1/messages", {**headers, "content-type": "application/json"}, orjson.dumps(body)
    )


def cost_by_team(base_url: str) -> dict[str, float]:
    """``gateway_cost_usd_total`` summed per ``team`` label, from the gateway's ``/metrics``."""
    answer = call(base_url, "GET", "/metrics", {"x-api-key": METRICS_KEY})
    if answer.status != 200:
        raise RuntimeError(f"/metrics answered {answer.status}")
    teams: dict[str, float] = {}
    for family in text_string_to_metric_families(answer.body.decode()):
        if family.name == COST_METRIC:
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    team = sample.labels.get("team", "")
                    teams[team] = teams.get(team, 0.0) + sample.value
    return teams


def _spent(rows: list[dict[str, Any]], scope: str, owner: str) -> float:
    found = [r.get("spent_usd") for r in rows if r.get("scope") == scope and r.get("owner") == owner]
    value = found[0] if found else None
    return float(value) if isinstance(value, int | float) else math.nan


def check_static(static_url: str, api_key: str, fleet: FleetConfig) -> list[Check]:
    """The static-key gateway: key requests go through, a sign-in bearer does not."""
    by_key = _message(static_url, {"x-api-key": api_key, "anthropic-version": "2023-06-01"})
    by_token = _message(static_url, _bearer(fleet.tokens[0]))
    teams = cost_by_team(static_url)
    return [
        Check(
            "static-key gateway: a static key is served, a sign-in bearer gets 401",
            by_key.status == 200 and by_token.status == 401,
            f"key -> {by_key.status}, bearer -> {by_token.status}",
        ),
        Check(
            "static-key gateway: its load was static-key traffic only",
            teams.get(SIGNED_IN_LABEL, 0.0) == 0.0 and sum(teams.values()) > 0,
            f"cost by team {teams}",
        ),
    ]


def check_signin(signin_url: str, fleet: FleetConfig, idp: IdpSentinel) -> list[Check]:
    """The sign-in gateway: bearers verified and run through the policy, counters charged."""
    user = _bearer(fleet.tokens[0])
    allowed = _message(signin_url, user)
    denied = _message(signin_url, user, model=DENIED_MODEL)
    settings = call(signin_url, "GET", "/managed/settings", user)
    settings_body = settings.json() if settings.status == 200 else {}
    teams = cost_by_team(signin_url)
    signed_in = teams.get(SIGNED_IN_LABEL, 0.0)
    listing = call(signin_url, "GET", "/v1/organizations/spend_limits", _bearer(fleet.admin_token))
    rows: list[dict[str, Any]] = listing.json().get("data", []) if listing.status == 200 else []
    pool = _spent(rows, "group", GROUP)
    own = _spent(rows, "user", user_subject(0))
    by_email = {
        r["owner"]: r.get("spent_usd") for r in rows if r.get("scope") == "user" and "@" in r["owner"]
    }
    return [
        Check(
            "sign-in gateway never contacted its IdP (discovery is lazy)",
            not idp.contacted(),
            f"issuer {idp.url}",
        ),
        Check(
            "sign-in gateway: a bearer's request is served with the spend-cap headers",
            allowed.status == 200 and UNIFIED_STATUS in allowed.headers,
            f"{allowed.status}, {UNIFIED_STATUS}: {allowed.headers.get(UNIFIED_STATUS)}",
        ),
        Check(
            "sign-in gateway: a model outside the allow rule is refused",
            denied.status == 400 and DENIED_MODEL in denied.body.decode(errors="replace"),
            f"{DENIED_MODEL} -> {denied.status}",
        ),
        Check(
            "sign-in gateway: the user's group gets its managed settings",
            settings.status == 200 and "CLAUDE_CODE_ENABLE_TELEMETRY" in str(settings_body),
            f"/managed/settings -> {settings.status}",
        ),
        Check(
            "sign-in gateway: its load was signed-in traffic only",
            signed_in > 0 and sum(teams.values()) == signed_in,
            f"cost by team {teams}",
        ),
        Check(
            f"sign-in gateway: the load's cost was charged to group pool {GROUP!r} and to a user",
            signed_in > 0 and abs(pool - signed_in) <= POOL_TOLERANCE * signed_in and own > 0,
            f"admin API {listing.status}: pool {pool:.4f} USD vs metrics {signed_in:.4f} USD; "
            f"{user_subject(0)} {own:.4f} USD; users named by e-mail: {by_email}",
        ),
    ]
