"""The sign-in endpoints, registered on the app when ``GATEWAY_OIDC_ISSUER`` is set.

OAuth endpoints answer ``{"error","error_description"}`` with ``cache-control: no-store``;
:func:`mount` also makes the app's authenticator accept the access tokens this service mints.

Details: docs/internals/gateway-fleet.md
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Final
from urllib.parse import parse_qsl

import orjson
from aiohttp import web
from aiohttp.web_protocol import RequestPayloadError

from gateway.client_address import HEADER_NAMES, Network, ProxyHeader, client_address
from gateway.config import ConfigError, Settings
from gateway.egress import EgressKind
from gateway.fleet.claims import Refused
from gateway.fleet.device import normalise_user_code
from gateway.fleet.oidc_client import IdpError
from gateway.fleet.signin_service import OAuthAnswer, SigninService, oauth_error
from gateway.fleet.signin_store import StoreUnavailable
from gateway.fleet.verification import (
    SESSION_COOKIE,
    code_entry_form,
    confirm_form,
    done_page,
    new_session_id,
    page,
)
from gateway.inbound import Authenticator

log = logging.getLogger("switchyard.fleet")

SIGNIN_KEY: Final = web.AppKey("signin", SigninService)
MAX_FORM_BYTES: Final = 16 * 1024
NO_STORE: Final = {"cache-control": "no-store", "pragma": "no-cache"}


def _json(answer: OAuthAnswer) -> web.Response:
    return web.Response(
        status=answer.status,
        body=orjson.dumps(answer.body),
        content_type="application/json",
        headers=NO_STORE,
    )


def _html(text: str, status: int = 200) -> web.Response:
    headers = {
        **NO_STORE,
        "x-frame-options": "DENY",
        "content-security-policy": "default-src 'none'; style-src 'unsafe-inline'; form-action 'self' *",
    }
    return web.Response(status=status, text=text, content_type="text/html", headers=headers)


async def _form(request: web.Request) -> dict[str, str] | None:
    """The urlencoded form (first value of each field), or ``None`` when it is not one or too big."""
    if request.content_length is not None and request.content_length > MAX_FORM_BYTES:
        return None
    body = b""
    try:
        async for chunk in request.content.iter_any():
            body += chunk
            if len(body) > MAX_FORM_BYTES:
                return None
    except (RequestPayloadError, ConnectionResetError):  # broken framing, or the client left
        return None
    try:
        pairs = parse_qsl(body.decode("utf-8"), keep_blank_values=True)
    except (UnicodeDecodeError, ValueError):
        return None
    form: dict[str, str] = {}
    for name, value in pairs:
        form.setdefault(name, value)
    return form


_PROXY_KINDS: Final = frozenset(
    {EgressKind.PROXY_AUTH, EgressKind.PROXY_REFUSED, EgressKind.PROXY_ERROR, EgressKind.PROXY_UNREACHABLE}
)


def idp_unavailable(exc: IdpError, step: str) -> web.Response:
    """The page for an IdP the gateway could not use, and one log line naming why (``exc``'s message
    never holds a credential: :mod:`gateway.fleet.idp_http`)."""
    log.warning("sign-in: %s: the identity provider could not be used: %s", step, exc)
    kind = exc.egress.kind if exc.egress is not None else None
    if kind in _PROXY_KINDS:
        reason = "The gateway's outbound proxy did not let it reach the identity provider."
    elif kind in (EgressKind.TLS_VERIFY, EgressKind.TLS):
        reason = "The gateway does not trust the identity provider's TLS certificate."
    elif kind is not None:
        reason = "The gateway cannot reach the identity provider."
    else:
        reason = "The identity provider's answer could not be used."
    body = (
        f"<p>{reason}</p><p>This is a problem with the gateway's set-up, not with your account: "
        "try again later, or tell the team that runs the gateway (its log names the cause).</p>"
    )
    return _html(page("Sign-in unavailable", body), 502 if kind is not None else 503)


OAUTH_ROUTES: Final = frozenset({"metadata", "device_authorization", "token", "revoke"})
"""The endpoints that answer OAuth JSON (the others are the browser's pages)."""


def store_unavailable(exc: StoreUnavailable, step: str, oauth: bool) -> web.Response:
    """503 for a sign-in step the shared store could not serve, and one log line saying why."""
    log.warning("sign-in: %s: %s", step, exc)
    if oauth:
        return _json(oauth_error(503, "temporarily_unavailable", "the sign-in store is unavailable; retry later"))
    body = (
        "<p>The gateway cannot reach the store that keeps sign-in state.</p><p>This is a problem with "
        "the gateway's set-up, not with your account: try again later, or tell the team that runs the "
        "gateway (its log names the cause).</p>"
    )
    return _html(page("Sign-in unavailable", body), 503)


class SigninRoutes:
    def __init__(
        self,
        service: SigninService,
        trusted_proxies: Sequence[Network] = (),
        proxy_header: ProxyHeader = "x-forwarded-for",
    ) -> None:
        self.service = service
        self.trusted_proxies = tuple(trusted_proxies)
        self.proxy_header: ProxyHeader = proxy_header
        self.base = service.settings.public_url or ""
        self.secure = self.base.startswith("https://")

    def _ip(self, request: web.Request) -> str:
        """The client address the per-IP limits and the audit log use (``GATEWAY_TRUSTED_PROXIES``
        and ``GATEWAY_TRUSTED_PROXY_HEADER``)."""
        name = HEADER_NAMES[self.proxy_header]
        forwarded = request.headers.getall(name, ()) if self.trusted_proxies else ()
        return client_address(request.remote, forwarded, self.trusted_proxies, self.proxy_header)

    async def metadata(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "issuer": self.base,
                "device_authorization_endpoint": f"{self.base}/oauth/device_authorization",
                "token_endpoint": f"{self.base}/oauth/token",
                "revocation_endpoint": f"{self.base}/oauth/revoke",
                "grant_types_supported": ["urn:ietf:params:oauth:grant-type:device_code", "refresh_token"],
                "token_endpoint_auth_methods_supported": ["none"],
                "revocation_endpoint_auth_methods_supported": ["none"],
                "response_types_supported": [],
                "gateway_protocol_version": 1,
            }
        )

    async def device_authorization(self, request: web.Request) -> web.Response:
        ip = self._ip(request)
        if not self.service.start_limit.allow(ip):
            self.service.audit_refusal("device_authorization_rate_limited", ip)
            return _json(
                oauth_error(429, "slow_down", "too many sign-ins started from this address; wait a minute")
            )
        form = await _form(request)
        if form is None:
            return _json(oauth_error(400, "invalid_request", "expected a form-encoded body"))
        answer = await self.service.device_authorization(form.get("surface", ""), ip)
        return _json(OAuthAnswer(200, answer))

    async def token(self, request: web.Request) -> web.Response:
        form = await _form(request)
        if form is None:
            return _json(oauth_error(400, "invalid_request", "expected a form-encoded body"))
        return _json(await self.service.token(form, self._ip(request)))

    async def revoke(self, request: web.Request) -> web.Response:
        form = await _form(request)
        if form is None or not form.get("token"):
            return _json(oauth_error(400, "invalid_request", "token is required"))
        await self.service.revoke(form["token"], self._ip(request))
        return web.Response(status=200, headers=NO_STORE)

    # -- the browser pages --------------------------------------------------------------------
    def _session(self, request: web.Request) -> tuple[str, bool]:
        existing = request.cookies.get(SESSION_COOKIE)
        if existing and 16 <= len(existing) <= 64:
            return existing, False
        return new_session_id(), True

    def _with_session(self, response: web.StreamResponse, session_id: str, fresh: bool) -> web.StreamResponse:
        if fresh:
            response.set_cookie(
                SESSION_COOKIE, session_id, httponly=True, samesite="Lax", secure=self.secure, path="/oauth"
            )
        return response

    async def device_page(self, request: web.Request) -> web.StreamResponse:
        session_id, fresh = self._session(request)
        prefilled = normalise_user_code(request.query.get("user_code", "")) or ""
        form = code_entry_form("/oauth/device", self.service.csrf.token(session_id), prefilled)
        return self._with_session(_html(form), session_id, fresh)

    async def submit_code(self, request: web.Request) -> web.StreamResponse:
        session_id, fresh = self._session(request)
        csrf = self.service.csrf.token(session_id)
        ip = self._ip(request)
        if not self.service.verify_limit.allow(ip):
            self.service.audit_refusal("rate_limited", ip)
            text = code_entry_form(
                "/oauth/device", csrf, "", "Too many attempts: wait a minute and try again."
            )
            return self._with_session(_html(text, 429), session_id, fresh)
        form = await _form(request) or {}
        if fresh or not self.service.csrf.check(session_id, form.get("csrf")):
            self.service.audit_refusal("csrf", ip)
            text = code_entry_form("/oauth/device", csrf, "", "This form expired: enter the code again.")
            return self._with_session(_html(text, 403), session_id, fresh)
        user_code = normalise_user_code(form.get("user_code", ""))
        grant = await self.service.grants.find(user_code) if user_code else None
        if grant is None:
            self.service.audit_refusal("unknown_user_code", ip)
            text = code_entry_form("/oauth/device", csrf, "", "That code is not valid or has expired.")
            return self._with_session(_html(text, 400), session_id, fresh)
        try:
            url = await self.service.begin_login(grant, session_id)
        except IdpError as exc:
            return idp_unavailable(exc, "discovery")
        return web.Response(status=303, headers={**NO_STORE, "location": url})

    async def callback(self, request: web.Request) -> web.StreamResponse:
        state = request.query.get("state", "")
        record = await self.service.attempt(state, request.cookies.get(SESSION_COOKIE)) if state else None
        if record is None:
            self.service.audit_refusal("callback_without_attempt", self._ip(request))
            return _html(
                page("Sign-in expired", '<p>Start again from <a href="/oauth/device">the code page</a>.</p>'),
                400,
            )
        if "error" in request.query or not request.query.get("code"):
            self.service.audit_refusal("idp_error", self._ip(request))
            return _html(page("Sign-in failed", "<p>The identity provider did not sign you in.</p>"), 400)
        try:
            identity = await self.service.finish_login(
                state, record, request.query["code"], self._ip(request)
            )
        except Refused as exc:
            return _html(page("Sign-in refused", "<p></p>", str(exc)), 403)
        except IdpError as exc:
            if exc.egress is not None:
                return idp_unavailable(exc, "code exchange")
            self.service.audit_refusal("idp_token_invalid", self._ip(request))
            log.warning("sign-in: the identity provider's token answer was refused: %s", exc)
            return _html(
                page("Sign-in failed", "<p>The identity provider's answer could not be verified.</p>"), 502
            )
        csrf = self.service.csrf.token(request.cookies[SESSION_COOKIE])
        who = identity.email or identity.subject
        return _html(confirm_form("/oauth/confirm", csrf, state, record["user_code"], who, record["surface"]))

    async def confirm(self, request: web.Request) -> web.StreamResponse:
        session_id = request.cookies.get(SESSION_COOKIE)
        form = await _form(request) or {}
        if not self.service.csrf.check(session_id, form.get("csrf")):
            self.service.audit_refusal("csrf", self._ip(request))
            return _html(page("Sign-in expired", "<p>This form expired. Start again.</p>"), 403)
        state = form.get("attempt", "")
        record = await self.service.attempt(state, session_id) if state else None
        if record is None or record.get("identity") is None:
            return _html(page("Sign-in expired", "<p>This sign-in expired. Run /login again.</p>"), 400)
        approve = form.get("decision") == "approve"
        if not await self.service.decide(state, record, approve, self._ip(request)):
            return _html(
                page("Sign-in expired", "<p>This code expired or was used. Run /login again.</p>"), 400
            )
        return _html(done_page(approve))


def mount(
    app: web.Application,
    settings: Settings,
    auth: Authenticator,
    clock: Callable[[], float] = time.time,
    on_outcome: Callable[[str], None] | None = None,
    token_groups: Callable[[tuple[str, ...]], tuple[str, ...]] | None = None,
) -> None:
    """Add the sign-in routes and let ``auth`` accept the tokens (``gateway.fleet.signin.register``);
    ``token_groups``: the IdP groups an access token carries (``gateway.fleet.token_groups``)."""
    holder: dict[str, SigninRoutes] = {}

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        cache = settings.cache
        try:
            service = await SigninService.build(
                settings.signin, cache.session_store, clock, settings.egress, cache.session_store_timeout_s
            )
        except StoreUnavailable as exc:  # the keys live there (no GATEWAY_TOKEN_SIGNING_KEYS_FILE)
            raise ConfigError(
                f"GATEWAY_SESSION_STORE: {exc} at start-up; sign-in keeps its signing and CSRF keys "
                "there: start Redis or correct the URL"
            ) from None
        app[SIGNIN_KEY] = service
        if on_outcome is not None:
            service.on_outcome = on_outcome
        if token_groups is not None:
            service.minter.groups = token_groups
        service.minter.max_header_bytes = settings.listener.max_header_bytes
        listener = settings.listener
        holder["routes"] = SigninRoutes(service, listener.trusted_proxies, listener.trusted_proxy_header)
        auth.accept_tokens(service.principal, service.remembered)
        async with service.denylist.syncing():
            yield
        await service.close()

    app.cleanup_ctx.append(lifecycle)

    def route(name: str) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        oauth = name in OAUTH_ROUTES

        async def handler(request: web.Request) -> web.StreamResponse:
            try:
                result: web.StreamResponse = await getattr(holder["routes"], name)(request)
            except StoreUnavailable as exc:
                return store_unavailable(exc, name, oauth)
            return result

        return handler

    app.router.add_get("/.well-known/oauth-authorization-server", route("metadata"))
    app.router.add_post("/oauth/device_authorization", route("device_authorization"))
    app.router.add_get("/oauth/device", route("device_page"))
    app.router.add_post("/oauth/device", route("submit_code"))
    app.router.add_get("/oauth/callback", route("callback"))
    app.router.add_post("/oauth/confirm", route("confirm"))
    app.router.add_post("/oauth/token", route("token"))
    app.router.add_post("/oauth/revoke", route("revoke"))
