"""A developer's interactive ``/login`` in the real Claude Code CLI (2.1.332) against the gateway.

How the CLI picks the gateway sign-in (found in 2.1.332): the ``forceLoginMethod: "gateway"`` and
``forceLoginGatewayUrl`` settings, honoured from admin-managed settings and, on a machine with none,
from the user's own ``~/.claude/settings.json``; ``/login`` then goes straight to "Cloud gateway".
The test's throw-away ``HOME`` holds those and answers the first-run screens (onboarding done, a
theme, the working folder trusted, auto mode off: auto mode's ``afk-mode-2026-01-31`` beta is not
one the emulator upstream accepts). The CLI runs in a pseudo-terminal; the test reads its screen.

Observed, and asserted below: ``/login`` discovers the gateway (RFC 8414) and asks to trust it
(loopback ``http``: nothing to pin), posts the device authorization, shows the user code, the
verification URL and the gateway's ``login_notice``, and opens ``verification_uri_complete`` in
the browser (``BROWSER``); the test, as the user, opens the URL shown, types the code shown, signs
in at the real OIDC IdP and approves; the CLI's 5 s polling gets the token, shows the e-mail to
confirm and stores the pair in ``~/.claude/.credentials.json`` (``enterpriseGateway``). It then
fetches ``/managed/settings`` with the bearer, asks to approve the managed ``env``
(``CLAUDE_CODE_GATEWAY_HINT_HEADERS=1``), restarts, and its model requests carry the bearer and
``x-claude-code-managed-settings-checksum`` equal to the served checksum: counted ``current``. A
later ``claude -p`` in the same ``HOME`` (no ``ANTHROPIC_*`` variables) uses the stored sign-in,
revalidating managed settings with ``If-None-Match`` (304). The CLI refreshes 5 minutes before the
stored expiry and stores the rotated pair; it does not refresh on a 401: a revoked bearer's 401 at
``/managed/settings`` ends the session ("sign in again with /login"). ``claude auth logout``
revokes the bearer and the refresh token (RFC 7009) and forgets the sign-in.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
from pathlib import Path
from typing import Any

import pytest

from gateway.fleet.audit import AUDIT_LOGGER
from gateway.fleet.settings_hint import HINT_HEADER
from tests.fleet_signin.signin_stack import (
    ALICE,
    UPSTREAM_KEY,
    Browser,
    SeenRequest,
    SigninStack,
    assert_error_shape,
    claims_of,
    custom_signin_stack,
)
from tests.support.claude_code import GATEWAY_LOGIN, claude_env, cli, run_claude
from tests.support.terminal import DOWN, ENTER, UP, Terminal, terminal

VERSION = GATEWAY_LOGIN  # 2.1.332: the gateway sign-in dialogs read below are this version's
METRICS_KEY = "sk-gw-login-metrics"
POLICY = """
groups:
  - group: eng
    managed_settings: {env: {CLAUDE_CODE_GATEWAY_HINT_HEADERS: "1"}}
"""
STEP_S = 30.0  # one screen of the dialog (a gateway round trip or two, a re-render)
MODEL_S = 90.0  # a model turn of the interactive session, through the gateway to the emulator
NOTICE = "Sign in with your corp.example account. Help: #claude-rollout"
REFRESH_WINDOW_S = 300  # the CLI refreshes when its stored expiry is this close (2.1.332)
WHO = "subject='idp|alice' email='alice@example.com' groups='eng,platform'"  # ALICE, as audited
OAUTH_AGENT = f"claude-code/{VERSION}"  # the User-Agent of the CLI's OAuth calls
MARK = "\u276f"  # the CLI's prompt and selected-option marker (heavy right-pointing angle)


def prepare_home(home: Path, workdir: Path, gateway_url: str, browser_log: Path) -> dict[str, str]:
    """User settings naming the gateway sign-in, the first-run screens answered, and the CLI's
    environment: a terminal, and a "browser" that writes down the URL it is asked to open."""
    (home / ".claude").mkdir(parents=True)
    settings = {
        "forceLoginMethod": "gateway",
        "forceLoginGatewayUrl": gateway_url,
        "disableAutoMode": "disable",
    }
    (home / ".claude" / "settings.json").write_text(json.dumps(settings))
    state = {
        "hasCompletedOnboarding": True,
        "theme": "dark",
        "projects": {str(workdir): {"hasTrustDialogAccepted": True}},
    }
    (home / ".claude.json").write_text(json.dumps(state))
    browser = home / "browser"
    browser.write_text(f'#!/bin/sh\nprintf "%s\\n" "$1" >> "{browser_log}"\n')
    browser.chmod(0o755)
    env = claude_env(home, TERM="xterm-256color", BROWSER=str(browser))
    env.pop("NO_COLOR")
    return env


async def choose(screen: Terminal, title: str, selected: str, option: str, key: str) -> None:
    """In the dialog ``title`` showing ``selected`` (its default), move to ``option`` with ``key``
    and press Enter, until the dialog is gone. The selection is read before every key press (never
    pressed past ``option``); a dialog drawn again from scratch (its default selected again: the
    CLI re-reads what it shows, e.g. managed settings fetched a second time) is answered again."""
    at_option = rf"{MARK}[^\S\n]*{re.escape(option)}"
    at_selected = rf"{MARK}[^\S\n]*{re.escape(selected)}"
    await screen.expect(re.escape(title), STEP_S)
    for _ in range(6):
        shown = await screen.expect(rf"{at_option}|{at_selected}", STEP_S)
        if re.match(at_selected, shown[0]):
            screen.send(key)
            if not await screen.gone(at_selected, 5.0):
                continue  # pressed while the dialog was still being drawn: lost
            await screen.expect(at_option, STEP_S)
        screen.send(ENTER)
        if await screen.gone(re.escape(title), 5.0):
            return
    raise AssertionError(f"the dialog {title!r} was not answered {option!r}:\n{screen.screen.text()}")


async def approve_as_the_user(stack: SigninStack, verification_uri: str, user_code: str) -> None:
    """The user opens the URL the terminal shows, types the code it shows, signs in at the IdP and
    approves on the confirmation page."""
    async with stack.browser().session as session:
        browser = Browser(session)
        entry = await browser.open(verification_uri)
        assert entry.status == 200 and entry.forms[0].fields.get("user_code", "") == "", entry.text
        confirm = await browser.submit(entry, user_code=user_code)
        assert confirm.status == 200 and user_code in confirm.text, confirm.text
        done = await browser.submit(confirm, button=("decision", "approve"))
        assert done.status == 200, done.text


async def login_interactively(stack: SigninStack, screen: Terminal) -> list[Any]:
    """``/login`` through to a first prompt answered by the emulator; that turn's upstream calls."""
    await screen.expect(r"Not logged in", STEP_S)
    screen.send("/login")
    await screen.expect(rf"{MARK}\s*/login", STEP_S)
    screen.send(ENTER)
    await screen.expect(rf"Gateway:\s*{re.escape(stack.gateway_url)}\s.*Enter to connect", STEP_S)
    screen.send(ENTER)
    await choose(screen, "Trust gateway 127.0.0.1?", "No, cancel login", "Yes, trust this gateway", UP)
    shown = await screen.expect(r"Code:\s+([B-Z]{4}-[B-Z]{4})\s.*?(http://\S+/oauth/device)\s", STEP_S)
    user_code, verification_uri = shown[1], shown[2]
    assert verification_uri == f"{stack.gateway_url}/oauth/device"
    await screen.expect(re.escape(NOTICE), STEP_S)  # the gateway's login_notice, beside the code
    await approve_as_the_user(stack, verification_uri, user_code)
    await screen.expect(rf"Signed in to Cloud gateway as {re.escape(ALICE['email'])}", STEP_S)
    await choose(screen, "Continue only if this is your account", "No, cancel login", "Yes, continue", UP)
    await screen.expect(r"Connected to Cloud gateway.*Press Enter to continue", STEP_S)
    screen.send(ENTER)
    await screen.expect(r"Managed settings require approval.*CLAUDE_CODE_GATEWAY_HINT_HEADERS", STEP_S)
    approval = "Managed settings require approval"
    await choose(screen, approval, "No, exit Claude Code", "Yes, I trust these settings", DOWN)
    await screen.expect(r"Cloud gateway", STEP_S)  # the restarted session's header names the provider
    before = len(stack.emulator.requests)
    # the header above was there before the restart too: keys typed while the old session exits are
    # lost (seen once on a loaded machine), so they are typed again until the new prompt shows them
    for _ in range(5):
        screen.send("say hi")
        with contextlib.suppress(AssertionError):
            await screen.expect(rf"{MARK}\s+say hi", STEP_S / 5)
            break
    await screen.expect(rf"{MARK}\s+say hi", STEP_S)
    screen.send(ENTER)
    await screen.expect(r"Echo", MODEL_S)  # the emulator's answer on the screen
    return [call for call in list(stack.emulator.requests)[before:] if call.path.startswith("/v1/messages")]


def credentials_file(home: Path) -> Path:
    return home / ".claude" / ".credentials.json"


def stored_signin(home: Path) -> dict[str, Any]:
    stored: dict[str, Any] = json.loads(credentials_file(home).read_text())["enterpriseGateway"]
    return stored


def bearer_of(request: SeenRequest) -> str | None:
    value = request.headers.get("authorization", "")
    return value.removeprefix("Bearer ") if value.startswith("Bearer ") else None


def since(stack: SigninStack, mark: int) -> list[SeenRequest]:
    return stack.gateway_requests[mark:]


def audited(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The gateway's sign-in audit lines so far, without the client address."""
    lines = [r.getMessage() for r in caplog.records if r.name == AUDIT_LOGGER]
    return [re.sub(r" ip=\S+$", "", line) for line in lines if line.startswith("signin.")]


def counted(exposition: str, metric: str, labels: str) -> float:
    found = re.search(rf"^{metric}\{{{re.escape(labels)}\}} (\S+)$", exposition, re.MULTILINE)
    assert found, (metric, labels)
    return float(found[1])


async def test_claude_code_login_signs_in_through_the_gateway(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    binary = cli(VERSION)
    caplog.set_level(logging.INFO, logger=AUDIT_LOGGER)
    home, workdir, browser_log = tmp_path / "home", tmp_path / "work", tmp_path / "browser.log"
    workdir.mkdir()
    (tmp_path / "policy.yaml").write_text(POLICY)
    env = {
        "GATEWAY_POLICY_FILE": str(tmp_path / "policy.yaml"),
        "GATEWAY_METRICS_API_KEYS": METRICS_KEY,
        "GATEWAY_SIGNIN_LOGIN_NOTICE": NOTICE,
    }
    async with custom_signin_stack(tmp_path, env, record_requests=True) as stack:
        cli_env = prepare_home(home, workdir, stack.gateway_url, browser_log)
        mark = len(stack.gateway_requests)
        async with terminal([str(binary)], cli_env, workdir) as screen:
            interactive = await login_interactively(stack, screen)
        login = since(stack, mark)

        # the stored sign-in: the gateway's token pair, for alice, with the endpoints to refresh at
        stored = stored_signin(home)
        assert stored["url"] == stack.gateway_url and stored["email"] == ALICE["email"]
        assert claims_of(stored["jwt"])["sub"] == ALICE["sub"]
        assert stored["tokenEndpoint"] == stack.metadata["token_endpoint"]
        assert stored["revocationEndpoint"] == stack.metadata["revocation_endpoint"]
        assert stored["idpRefreshToken"]

        # the CLI's own OAuth calls: discovery, device authorization, polls until the token
        oauth = [r for r in login if r.headers.get("user-agent") == OAUTH_AGENT]
        calls = [(r.method, r.path) for r in oauth]
        assert calls[:2] == [
            ("GET", "/.well-known/oauth-authorization-server"),
            ("POST", "/oauth/device_authorization"),
        ]
        polls = oauth[2 : calls.index(("GET", "/managed/settings"))]
        assert polls and {r.path for r in polls} == {"/oauth/token"}
        assert polls[-1].status == 200 and {r.status for r in polls[:-1]} <= {400}  # authorization_pending
        assert audited(caplog) == [
            "signin.device_authorization surface='claude_code'",  # the form's only field, recorded
            f"signin.approved {WHO} surface='claude_code'",
            f"signin.token_issued {WHO}",
        ]
        opened = browser_log.read_text().split() if browser_log.exists() else []
        assert opened and re.fullmatch(
            rf"{re.escape(stack.gateway_url)}/oauth/device\?user_code=[B-Z-]+", opened[0]
        )

        # then managed settings with the stored bearer, and the model request with it and the hint
        settings_fetches = [r for r in login if r.path == "/managed/settings"]
        assert settings_fetches[0].status == 200 and {bearer_of(r) for r in settings_fetches} == {
            stored["jwt"]
        }
        async with stack.http.get(
            f"{stack.gateway_url}/managed/settings", headers={"authorization": f"Bearer {stored['jwt']}"}
        ) as response:
            served = await response.json()
        assert served["settings"] == {"env": {"CLAUDE_CODE_GATEWAY_HINT_HEADERS": "1"}}
        model_calls = [r for r in login if r.path == "/v1/messages"]
        assert model_calls and len(model_calls) == len(interactive)
        for request in model_calls:
            assert bearer_of(request) == stored["jwt"] and request.headers[HINT_HEADER] == served["checksum"]
        for call in interactive:  # upstream: the gateway's key, never the developer's bearer
            assert call.header("x-api-key") == UPSTREAM_KEY
            assert all(stored["jwt"] not in value for _, value in call.headers)

        # a later `claude -p` in the same HOME uses the stored sign-in (no ANTHROPIC_* variables)
        mark = len(stack.gateway_requests)
        run = await run_claude(binary, ("-p", "say hi"), claude_env(home), workdir)
        assert run.result is not None and not run.result.get("is_error"), run.describe()
        later = since(stack, mark)
        revalidated = [r for r in later if r.path == "/managed/settings"]
        assert revalidated and revalidated[0].headers["if-none-match"] == f'"{served["checksum"]}"'
        assert revalidated[0].status == 304
        printed = [r for r in later if r.path == "/v1/messages"]
        assert printed and all(bearer_of(r) == stored["jwt"] for r in printed)
        assert all(r.headers[HINT_HEADER] == served["checksum"] for r in printed)
        model_calls += printed

        # 55 minutes on (the gateway's clock; the client's stored expiry 4 minutes away): the CLI
        # refreshes before its next run's requests, stores the rotated pair and uses the new bearer
        stack.clock.advance(3300)
        credentials = json.loads(credentials_file(home).read_text())
        credentials["enterpriseGateway"]["expiresAt"] = int((time.time() + REFRESH_WINDOW_S - 60) * 1000)
        credentials_file(home).write_text(json.dumps(credentials))
        mark = len(stack.gateway_requests)
        run = await run_claude(binary, ("-p", "say hi"), claude_env(home), workdir)
        assert run.result is not None and not run.result.get("is_error"), run.describe()
        refreshed = stored_signin(home)
        assert refreshed["jwt"] != stored["jwt"] and refreshed["idpRefreshToken"] != stored["idpRefreshToken"]
        assert refreshed["expiresAt"] / 1000 > time.time() + 3000
        later = since(stack, mark)
        assert later[0].path == "/oauth/token" and later[0].status == 200  # before any bearer request
        assert [r.path for r in later].count("/oauth/token") == 1
        assert audited(caplog)[-1] == f"signin.refreshed {WHO}"
        printed = [r for r in later if r.path == "/v1/messages"]
        assert printed and all(bearer_of(r) == refreshed["jwt"] for r in printed)
        model_calls += printed

        # past the first token's expiry it is refused; the refreshed one still works
        stack.clock.advance(600)
        status, headers, body = await stack.message(stored["jwt"])
        assert status == 401 and headers["x-should-retry"] == "false", body
        assert_error_shape(body, "authentication_error")
        status, _, body = await stack.message(refreshed["jwt"])
        assert status == 200, body

        # every model request carried the checksum of the settings in force: counted current
        async with stack.http.get(
            f"{stack.gateway_url}/metrics", headers={"x-api-key": METRICS_KEY}
        ) as response:
            exposition = await response.text()
        hints = "gateway_fleet_managed_settings_hints_total"
        assert counted(exposition, hints, 'group="eng",state="current"') == len(model_calls)
        assert counted(exposition, hints, 'group="eng",state="unknown"') == 1  # the test's own stack.message
        assert counted(exposition, "gateway_fleet_signins_total", 'outcome="refreshed"') == 1

        # a bearer the gateway refuses (revoked elsewhere: another device's sign-out, an admin) ends
        # the CLI's session at its /managed/settings fetch: no refresh tried, nothing sent upstream
        status, _ = await stack.form_post(stack.metadata["revocation_endpoint"], {"token": refreshed["jwt"]})
        assert status == 200
        mark, upstream = len(stack.gateway_requests), len(stack.emulator.requests)
        run = await run_claude(binary, ("-p", "say hi"), claude_env(home), workdir, timeout_s=60)
        assert run.returncode != 0 and "no longer accepts this session" in run.stdout + run.stderr, (
            run.describe()
        )
        assert [(r.path, r.status) for r in since(stack, mark)] == [("/managed/settings", 401)]
        assert len(stack.emulator.requests) == upstream

        # `claude auth logout` revokes the bearer, then the refresh token, and forgets the sign-in
        mark, audit_mark = len(stack.gateway_requests), len(audited(caplog))
        process = await asyncio.create_subprocess_exec(
            str(binary), "auth", "logout", cwd=str(workdir), env=claude_env(home),
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            out, err = await asyncio.wait_for(process.communicate(), 60)
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
        assert process.returncode == 0, (out, err)
        revocations = [r for r in since(stack, mark) if r.path == "/oauth/revoke"]
        assert [(r.status, r.headers.get("user-agent")) for r in revocations] == [(200, OAUTH_AGENT)] * 2
        assert audited(caplog)[audit_mark:] == [
            f"signin.revoked kind=access_token subject={ALICE['sub']!r}",
            f"signin.revoked kind=refresh_token {WHO}",
        ]
        assert not credentials_file(home).exists() or "enterpriseGateway" not in json.loads(
            credentials_file(home).read_text()
        )
        status, body = await stack.refresh(refreshed["idpRefreshToken"])  # valid until the sign-out
        assert status == 401 and body["error"] == "invalid_grant", body
