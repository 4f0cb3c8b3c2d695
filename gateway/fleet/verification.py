"""The verification page's pieces: HTML, CSRF tokens, the per-IP attempt limit.

The browser session is a random cookie (``HttpOnly``, ``SameSite=Lax``, ``Secure`` on https); each
form carries a CSRF token that is an HMAC of that cookie under a key kept in the sign-in store
(shared by replicas), so a form posted from another site (which cannot read the cookie) fails. A
pre-filled code (``verification_uri_complete``) is only put in the form: the user still presses the
button (RFC 8628 §5.4), and confirms again after the IdP said who they are. Every form submission
counts against the client IP (a sliding minute, ``GATEWAY_SIGNIN_VERIFY_PER_MINUTE``); the map of
IPs is bounded (oldest forgotten first).
"""

from __future__ import annotations

import hashlib
import hmac
import html
import secrets
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Final

SESSION_COOKIE: Final = "switchyard_signin"
MAX_TRACKED_IPS: Final = 10_000
WINDOW_S: Final = 60.0


def new_session_id() -> str:
    return secrets.token_urlsafe(24)


class Csrf:
    def __init__(self, key: bytes) -> None:
        self._key = key

    def token(self, session_id: str) -> str:
        return hmac.new(self._key, session_id.encode(), hashlib.sha256).hexdigest()

    def check(self, session_id: str | None, presented: str | None) -> bool:
        if not session_id or not presented:
            return False
        return hmac.compare_digest(self.token(session_id), presented)


class AttemptLimit:
    """At most ``per_minute`` attempts per IP in any 60 s; bounded memory."""

    def __init__(self, per_minute: int, clock: Callable[[], float], max_ips: int = MAX_TRACKED_IPS) -> None:
        self._per_minute = per_minute
        self._clock = clock
        self._max_ips = max_ips
        self._attempts: OrderedDict[str, deque[float]] = OrderedDict()

    def allow(self, ip: str) -> bool:
        now = self._clock()
        seen = self._attempts.get(ip)
        if seen is None:
            seen = deque()
            self._attempts[ip] = seen
            if len(self._attempts) > self._max_ips:
                self._attempts.popitem(last=False)
        else:
            self._attempts.move_to_end(ip)
        while seen and now - seen[0] >= WINDOW_S:
            seen.popleft()
        if len(seen) >= self._per_minute:
            return False
        seen.append(now)
        return True

    def __len__(self) -> int:
        return len(self._attempts)


_STYLE: Final = (
    "body{font-family:system-ui,sans-serif;max-width:32rem;margin:4rem auto;padding:0 1rem}"
    "input[name=user_code]{font:1.5rem monospace;letter-spacing:.2rem;width:12rem;text-transform:uppercase}"
    "button{font-size:1rem;padding:.4rem 1rem;margin-right:.5rem}.error{color:#b00}code{font-size:1.3rem}"
)


def page(title: str, body: str, status_note: str | None = None) -> str:
    note = f'<p class="error">{html.escape(status_note)}</p>' if status_note else ""
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f'<meta name="viewport" content="width=device-width"><style>{_STYLE}</style></head>'
        f"<body><h1>{html.escape(title)}</h1>{note}{body}</body></html>"
    )


def code_entry_form(action: str, csrf: str, prefilled: str, error: str | None = None) -> str:
    body = (
        "<p>Enter the code shown in your terminal to sign Claude Code in.</p>"
        f'<form method="post" action="{html.escape(action)}">'
        f'<input type="hidden" name="csrf" value="{csrf}">'
        f'<input name="user_code" value="{html.escape(prefilled)}" autocomplete="off" required '
        'placeholder="XXXX-XXXX" maxlength="12">'
        '<p><button type="submit">Continue</button></p></form>'
    )
    return page("Sign in to Claude Code", body, error)


def confirm_form(action: str, csrf: str, attempt: str, user_code: str, who: str, surface: str) -> str:
    body = (
        f"<p>Signed in at your identity provider as <b>{html.escape(who)}</b>.</p>"
        f"<p>Approve the sign-in of the device showing <code>{html.escape(user_code)}</code>"
        f"{' (' + html.escape(surface) + ')' if surface else ''}? Only approve a code you started yourself.</p>"
        f'<form method="post" action="{html.escape(action)}">'
        f'<input type="hidden" name="csrf" value="{csrf}">'
        f'<input type="hidden" name="attempt" value="{html.escape(attempt)}">'
        '<button type="submit" name="decision" value="approve">Approve</button>'
        '<button type="submit" name="decision" value="deny">Deny</button></form>'
    )
    return page("Confirm the sign-in", body)


def done_page(approved: bool) -> str:
    if approved:
        return page(
            "Signed in",
            "<p>Claude Code is signed in. You can close this window and return to your terminal.</p>",
        )
    return page("Sign-in denied", "<p>The sign-in was denied. You can close this window.</p>")
