"""A sign-in stack on loopback: the real OIDC IdP (npm oauth2-mock-server), the Anthropic emulator
upstream, and a gateway in this event loop with sign-in on and a wall clock the test moves; plus a
tiny browser (aiohttp with a cookie jar: follows redirects, reads and submits HTML forms) that
walks the verification page like a user.
"""

from __future__ import annotations

import contextlib
import ssl
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from joserfc import jwt
from joserfc.jwk import OctKey

from emulators import EmulatorConfig, RunningEmulator, run_emulator
from gateway.app import create_app
from gateway.config import Settings
from gateway.metrics import GatewayMetrics
from gateway.process import running
from tests.support.oidc_idp import RunningIdp, running_idp
from tests.support.serve_process import free_port

STATIC_KEY = "sk-gw-static-service-account"
UPSTREAM_KEY = "sk-ant-upstream-signin"
CLIENT_ID = "switchyard-gateway"
CLIENT_SECRET = "client-secret-at-the-idp"
SIGNING_KID = "k2026"
SIGNING_SECRET = "a-signing-secret-of-at-least-32-characters!"
DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
ALICE: dict[str, Any] = {"sub": "idp|alice", "email": "alice@example.com", "groups": ["eng", "platform"]}


class MovableClock:
    """The gateway's sign-in wall clock: real time plus what the test advanced."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += seconds


@dataclass
class Form:
    action: str
    method: str
    fields: dict[str, str]
    buttons: list[tuple[str, str]]


class _FormParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.forms: list[Form] = []
        self.scripts = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = {name: value or "" for name, value in attrs}
        if tag == "form":
            self.forms.append(
                Form(attributes.get("action", ""), attributes.get("method", "get").lower(), {}, [])
            )
        elif tag == "script":
            self.scripts += 1
        elif self.forms and tag == "input" and attributes.get("name"):
            self.forms[-1].fields[attributes["name"]] = attributes.get("value", "")
        elif self.forms and tag == "button" and attributes.get("name"):
            self.forms[-1].buttons.append((attributes["name"], attributes.get("value", "")))


@dataclass
class Page:
    status: int
    url: str
    text: str
    forms: list[Form]
    scripts: int


class Browser:
    def __init__(self, session: aiohttp.ClientSession) -> None:
        self.session = session

    async def _page(self, response: aiohttp.ClientResponse) -> Page:
        text = await response.text()
        parser = _FormParser()
        parser.feed(text)
        return Page(response.status, str(response.url), text, parser.forms, parser.scripts)

    async def open(self, url: str) -> Page:
        async with self.session.get(url) as response:
            return await self._page(response)

    async def submit(self, page: Page, button: tuple[str, str] | None = None, **fields: str) -> Page:
        form = page.forms[0]
        data = {**form.fields, **fields}
        if button is not None:
            assert button in form.buttons, form.buttons
            data[button[0]] = button[1]
        url = str(aiohttp.client.URL(page.url).join(aiohttp.client.URL(form.action)))
        async with self.session.post(url, data=data) as response:
            return await self._page(response)


@dataclass(frozen=True)
class SeenRequest:
    """A request the gateway answered, as its client sent it (see ``record_requests``)."""

    method: str
    path: str
    status: int
    headers: dict[str, str]  # lower-cased names


@dataclass
class SigninStack:
    gateway_url: str
    idp: RunningIdp
    emulator: RunningEmulator
    clock: MovableClock
    http: aiohttp.ClientSession
    tmp: Path
    metadata: dict[str, Any] = field(default_factory=dict)
    replica_urls: list[str] = field(default_factory=list)  # every replica (the first is gateway_url)
    browser_ca: Path | None = None  # the CA the user's browser trusts besides the system's (a TLS IdP)
    gateway_requests: list[SeenRequest] = field(default_factory=list)  # with ``record_requests``

    def browser(self) -> Browser:
        context = ssl.create_default_context()
        if self.browser_ca is not None:
            context.load_verify_locations(self.browser_ca)
        return Browser(
            aiohttp.ClientSession(
                cookie_jar=aiohttp.CookieJar(unsafe=True), connector=aiohttp.TCPConnector(ssl=context)
            )
        )

    async def form_post(self, path_or_url: str, data: dict[str, str]) -> tuple[int, dict[str, Any]]:
        url = path_or_url if path_or_url.startswith("http") else self.gateway_url + path_or_url
        async with self.http.post(url, data=data, headers={"user-agent": "claude-code/2.1.332"}) as response:
            body = await response.json(content_type=None) if response.content_length != 0 else {}
            return response.status, body or {}

    async def start_device(self) -> dict[str, Any]:
        status, body = await self.form_post(
            self.metadata["device_authorization_endpoint"], {"surface": "claude_code"}
        )
        assert status == 200, body
        return body

    async def poll(self, device_code: str) -> tuple[int, dict[str, Any]]:
        return await self.form_post(
            self.metadata["token_endpoint"], {"grant_type": DEVICE_GRANT, "device_code": device_code}
        )

    async def approve_in_browser(self, device: dict[str, Any], decision: str = "approve") -> Page:
        """The user opens ``verification_uri_complete``, presses Continue, signs in at the IdP
        (followed redirects), and approves (or denies) on the confirmation page."""
        async with self.browser().session as session:
            browser = Browser(session)
            entry = await browser.open(device["verification_uri_complete"])
            assert entry.status == 200 and entry.forms[0].fields["user_code"] == device["user_code"]
            confirm = await browser.submit(entry)
            assert confirm.status == 200, confirm.text
            assert device["user_code"] in confirm.text
            return await browser.submit(confirm, button=("decision", decision))

    async def sign_in(self) -> dict[str, Any]:
        device = await self.start_device()
        done = await self.approve_in_browser(device)
        assert done.status == 200, done.text
        status, tokens = await self.poll(device["device_code"])
        assert status == 200, tokens
        return tokens

    async def refresh(self, refresh_token: str) -> tuple[int, dict[str, Any]]:
        return await self.form_post(
            self.metadata["token_endpoint"], {"grant_type": "refresh_token", "refresh_token": refresh_token}
        )

    async def message(self, bearer: str) -> tuple[int, dict[str, str], dict[str, Any]]:
        body = {
            "model": "claude-sonnet-4-5",
            "max_tokens": 16,
            "messages": [{"role": "user", "content": "hi"}],
        }
        headers = {"authorization": f"Bearer {bearer}", "anthropic-version": "2023-06-01"}
        async with self.http.post(f"{self.gateway_url}/v1/messages", json=body, headers=headers) as response:
            return response.status, dict(response.headers), await response.json(content_type=None)


def claims_of(token: str) -> dict[str, Any]:
    """The access token's claims, verified with the test's signing key (the keys file)."""
    return dict(jwt.decode(token, OctKey.import_key(SIGNING_SECRET), algorithms=["HS256"]).claims)


def signin_stack(
    tmp: Path, replicas_count: int = 1, **env: str
) -> contextlib.AbstractAsyncContextManager[SigninStack]:
    """The stack; ``replicas_count`` gateways share one settings snapshot (give them a Redis
    ``GATEWAY_SESSION_STORE`` to share sign-in state). ``GATEWAY_TOKEN_SIGNING_KEYS_FILE=""`` runs
    without the keys file (the key is generated and kept in the store)."""
    return custom_signin_stack(tmp, env, replicas_count=replicas_count)


@contextlib.asynccontextmanager
async def custom_signin_stack(
    tmp: Path,
    env: Mapping[str, str],
    *,
    replicas_count: int = 1,
    idp: RunningIdp | None = None,
    browser_ca: Path | None = None,
    record_requests: bool = False,
) -> AsyncIterator[SigninStack]:
    """:func:`signin_stack` with ``idp``: one the test started (e.g. over TLS, its port known to a
    proxy first), ``browser_ca``: a CA the user's browser trusts besides the system's, and
    ``record_requests``: every request a replica answers is appended to ``gateway_requests``
    (what a client sent the gateway itself, which the upstream never sees: sign-in, bearers,
    ``/managed/settings``)."""
    keys_file = tmp / "signing-keys"
    keys_file.write_text(f"# new key first\n{SIGNING_KID} {SIGNING_SECRET}\n")
    async with contextlib.AsyncExitStack() as started:
        if idp is None:
            idp = await started.enter_async_context(running_idp(tmp, None, **ALICE))
        emulator = await started.enter_async_context(
            run_emulator(EmulatorConfig(api_keys=frozenset({UPSTREAM_KEY})), port=0)
        )
        port = free_port()
        settings = Settings.from_environ(
            {
                "GATEWAY_API_KEYS": STATIC_KEY,
                "ANTHROPIC_API_KEY": UPSTREAM_KEY,
                "ANTHROPIC_BASE_URL": emulator.base_url,
                "GATEWAY_PUBLIC_URL": f"http://127.0.0.1:{port}",
                "GATEWAY_OIDC_ISSUER": idp.issuer,
                "GATEWAY_OIDC_CLIENT_ID": CLIENT_ID,
                "GATEWAY_OIDC_CLIENT_SECRET": CLIENT_SECRET,
                "GATEWAY_ALLOW_INSECURE_LOOPBACK": "1",
                "GATEWAY_TOKEN_SIGNING_KEYS_FILE": str(keys_file),
                **env,
            },
            serving=True,
        )
        clock = MovableClock()
        seen: list[SeenRequest] = []

        async def record(request: web.Request, response: web.StreamResponse) -> None:
            headers = {name.lower(): value for name, value in request.headers.items()}
            seen.append(SeenRequest(request.method, request.path, response.status, headers))

        async with contextlib.AsyncExitStack() as replicas:
            urls = []
            for index in range(replicas_count):
                app = create_app(settings, metrics=GatewayMetrics(), signin_clock=clock)
                if record_requests:
                    app.on_response_prepare.append(record)
                server = await replicas.enter_async_context(
                    running(app, "127.0.0.1", port if index == 0 else 0)
                )
                urls.append(server.base_url)
            http = await replicas.enter_async_context(aiohttp.ClientSession())
            stack = SigninStack(
                urls[0],
                idp,
                emulator,
                clock,
                http,
                tmp,
                replica_urls=urls,
                browser_ca=browser_ca,
                gateway_requests=seen,
            )
            async with http.get(f"{urls[0]}/.well-known/oauth-authorization-server") as response:
                assert response.status == 200
                stack.metadata = await response.json()
            yield stack


def assert_error_shape(body: dict[str, Any], error_type: str) -> None:
    """The Anthropic error envelope with ``error_type``."""
    assert body.get("type") == "error", body
    assert body["error"]["type"] == error_type and isinstance(body["error"]["message"], str), body
