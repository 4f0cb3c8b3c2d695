"""Fault injection: how an emulator misbehaves, selected per request.

The header ``x-emulator-fault`` carries a comma-separated list of directives (a request without it
gets the app's standing fault, if one is set: ``RunningEmulator.set_fault``, an outage of the whole
upstream that a test switches on and off); requests that share
an ``x-emulator-fault-key`` header (default: the directive text itself) share the counters of the
counting directives, so "fail twice, then succeed" works across a client's retries.

=============================  ==============================================================
``stall_headers=S``            wait S seconds before answering (nothing sent meanwhile)
``stall_after=N:S``            stream N events, then go silent for S seconds, then carry on
``trickle=N:I:C``              stream N events, then send C pings I seconds apart, then carry on
``html``                       answer 200 with an HTML page (a proxy's error page)
``truncate_after=N``           stream N events, then end the body cleanly without message_stop
``reset``                      reset the connection before answering
``reset_after=N``              stream N events, then reset the connection
``fail_first=N:STATUS``        the first N requests with this key fail with STATUS
``unauthorized_once``          the first request with this key gets 401 (an expired credential)
``retry_after=S``              add ``retry-after: S`` to the errors above
``retry_after_ms=MS``          add ``retry-after-ms: MS`` to the errors above
``first=N``                    apply the other directives to the first N requests with this key
                               only (later ones are answered normally)
``overloaded_after=N``         stream N events, then the API's ``error`` event
                               ``overloaded_error`` and the end of the body (HTTP 200 already
                               sent: an overload in the middle of a stream; before any
                               content when N stops short of the first content event)
``model=NAME``                 apply the other directives only to requests for model NAME (the
                               body's ``model``, or the model in the URL path); others are
                               answered normally, and do not count
=============================  ==============================================================

The mid-stream error is the shape Anthropic publishes for errors during a stream ("Error events"
in https://docs.claude.com/en/docs/build-with-claude/streaming: ``event: error`` with data
``{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}``, sent "when
Anthropic is overloaded" where a non-streaming request would get a 529). On Bedrock the
overload is the stream exception frame ``serviceUnavailableException`` (its ``ResponseStream``
member for the 503 Bedrock answers an overload with, ``bedrock_exceptions``).

Event counts include every event the wire format sends (``message_start``, ``ping`` ...).
Stalls sleep on the emulator's clock, so tests use short durations or a manual clock.
"""

from __future__ import annotations

import collections
import json
import weakref
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Final

from aiohttp import web

from .clock import Clock
from .errors import ApiError
from .state import get_state

FAULT_HEADER: Final = "x-emulator-fault"
FAULT_KEY_HEADER: Final = "x-emulator-fault-key"

_counters: weakref.WeakKeyDictionary[web.Application, collections.Counter[str]] = weakref.WeakKeyDictionary()


class ConnectionReset(ConnectionResetError):
    """Raised after the emulator aborted the client's connection on purpose."""


@dataclass(frozen=True, slots=True)
class FaultPlan:
    key: str = ""
    stall_headers_s: float = 0.0
    stall_after: tuple[int, float] | None = None
    trickle: tuple[int, float, int] | None = None
    html: bool = False
    truncate_after: int | None = None
    reset: bool = False
    reset_after: int | None = None
    fail_first: tuple[int, int] | None = None
    unauthorized_once: bool = False
    retry_after_s: str | None = None
    retry_after_ms: str | None = None
    first: int | None = None
    overloaded_after: int | None = None
    model: str | None = None

    @property
    def active(self) -> bool:
        return self != FaultPlan(key=self.key, model=self.model)

    @classmethod
    def from_headers(cls, headers: Mapping[str, str]) -> FaultPlan:
        spec = headers.get(FAULT_HEADER, "").strip()
        if not spec:
            return cls()
        return cls.parse(spec, headers.get(FAULT_KEY_HEADER, spec))

    @classmethod
    def parse(cls, spec: str, key: str) -> FaultPlan:
        fields: dict[str, object] = {"key": key}
        for raw in spec.split(","):
            directive = raw.strip()
            if not directive:
                continue
            name, _, value = directive.partition("=")
            parts = value.split(":") if value else []
            try:
                if name == "stall_headers":
                    fields["stall_headers_s"] = float(value)
                elif name == "stall_after":
                    fields["stall_after"] = (int(parts[0]), float(parts[1]))
                elif name == "trickle":
                    fields["trickle"] = (int(parts[0]), float(parts[1]), int(parts[2]))
                elif name == "html":
                    fields["html"] = True
                elif name == "truncate_after":
                    fields["truncate_after"] = int(value)
                elif name == "reset":
                    fields["reset"] = True
                elif name == "reset_after":
                    fields["reset_after"] = int(value)
                elif name == "fail_first":
                    fields["fail_first"] = (int(parts[0]), int(parts[1]))
                elif name == "unauthorized_once":
                    fields["unauthorized_once"] = True
                elif name == "retry_after":
                    fields["retry_after_s"] = str(float(value)).removesuffix(".0")
                elif name == "retry_after_ms":
                    fields["retry_after_ms"] = f"{float(value):g}"
                elif name == "first":
                    fields["first"] = int(value)
                elif name == "overloaded_after":
                    fields["overloaded_after"] = int(value)
                elif name == "model":
                    if not value:
                        raise ValueError(directive)
                    fields["model"] = value
                else:
                    raise ApiError(400, f"Unknown emulator fault {name!r}")
            except (IndexError, ValueError):
                raise ApiError(400, f"Malformed emulator fault {directive!r}") from None
        return cls(**fields)  # type: ignore[arg-type]

    def _retry_headers(self) -> dict[str, str]:
        headers: dict[str, str] = {}
        if self.retry_after_s is not None:
            headers["retry-after"] = self.retry_after_s
        if self.retry_after_ms is not None:
            headers["retry-after-ms"] = self.retry_after_ms
        return headers

    async def before_answer(self, request: web.Request, clock: Clock) -> web.Response | None:
        """Faults that act before the answer: errors, stalls, resets, an HTML page.

        Raises ``ApiError`` (rendered by the app in its own envelope) or ``ConnectionReset``;
        returns a response to send instead of the answer, or ``None`` to answer normally.
        """
        if not self.active:
            return None
        counters = _counters.setdefault(request.app, collections.Counter())
        if self.first is not None:
            counters["first:" + self.key] += 1
            if counters["first:" + self.key] > self.first:
                request[FAULT_PLAN] = FaultPlan()  # this request is answered normally
                return None
        if self.unauthorized_once:
            counters["unauthorized:" + self.key] += 1
            if counters["unauthorized:" + self.key] == 1:
                raise ApiError(401, "The access token expired", headers=self._retry_headers())
        if self.fail_first is not None:
            count, status = self.fail_first
            counters["fail:" + self.key] += 1
            if counters["fail:" + self.key] <= count:
                raise ApiError(status, headers=self._retry_headers())
        if self.stall_headers_s > 0:
            await clock.sleep(self.stall_headers_s)
        if self.reset:
            abort_connection(request)
        if self.html:
            return web.Response(
                status=200,
                content_type="text/html",
                text="<html><body><h1>Proxy notice</h1><p>Access to this site is filtered.</p></body></html>",
            )
        return None

    async def after_event(
        self,
        sent: int,
        request: web.Request,
        clock: Clock,
        send_ping: Callable[[], Awaitable[None]] | None,
    ) -> bool:
        """Called after each streamed event (``sent`` events so far); ``False`` ends the body."""
        if not self.active:
            return True
        if self.reset_after is not None and sent >= self.reset_after:
            abort_connection(request)
        if self.truncate_after is not None and sent >= self.truncate_after:
            return False
        if self.stall_after is not None and sent == self.stall_after[0]:
            await clock.sleep(self.stall_after[1])
        if self.overloaded_after is not None and sent >= self.overloaded_after:
            return False
        if self.trickle is not None and sent == self.trickle[0]:
            _, interval, count = self.trickle
            for _ in range(count):
                await clock.sleep(interval)
                if send_ping is not None:
                    await send_ping()
        return True

    def stream_error(self, sent: int) -> dict[str, object] | None:
        """The ``error`` event to send after ``sent`` events (``overloaded_after``), if any."""
        if self.overloaded_after is None or sent < self.overloaded_after:
            return None
        return {"type": "error", "error": ApiError(529).error_object()}


FAULT_PLAN: Final[web.RequestKey[FaultPlan]] = web.RequestKey("emulator_fault_plan", FaultPlan)


def plan_of(request: web.Request) -> FaultPlan:
    """The fault plan ``apply_faults`` attached to ``request`` (an inactive one if none)."""
    return request.get(FAULT_PLAN) or FaultPlan()


@web.middleware
async def apply_faults(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """The innermost middleware of every emulator app: faults that act before the answer.

    Errors it raises are ``ApiError``s, rendered by the app's own (outer) error middleware in the
    app's wire format.
    """
    plan = FaultPlan.from_headers(request.headers)
    standing = get_state(request.app).standing_fault
    if not plan.active and standing.spec and not _credential_route(request.path):  # an outage set by the test
        plan = FaultPlan.parse(standing.spec, standing.key)
    if plan.model is not None and plan.model not in await _request_models(request):
        plan = FaultPlan()  # another model's request: answered normally
    request[FAULT_PLAN] = plan
    try:
        early = await plan.before_answer(request, get_state(request.app).config.clock)
    except ConnectionReset:
        return web.Response(status=200)  # never sent: the transport is gone
    if early is not None:
        return early
    try:
        return await handler(request)
    except ConnectionReset:
        return web.StreamResponse(status=200)


def _credential_route(path: str) -> bool:
    """The token endpoints served beside the API (Google's OAuth, Entra ID, STS): separate services
    in reality, so an outage of the upstream's API leaves them up."""
    return path.endswith("/token") or "/oauth2/" in path or "/.well-known/" in path or path == "/"


async def _request_models(request: web.Request) -> set[str]:
    """The model a request names: the JSON body's ``model`` and the URL's path segments (Bedrock
    and Vertex put the model in the path)."""
    models = set(request.path.split("/"))
    for segment in list(models):
        models.add(segment.split(":")[0].split("@")[0])
    if request.body_exists:
        try:
            body = json.loads(await request.read())
        except ValueError:
            body = None
        if isinstance(body, dict) and isinstance(body.get("model"), str):
            models.add(body["model"])
    return models


def abort_connection(request: web.Request) -> None:
    """Reset the TCP connection (RST, not FIN) and stop handling the request."""
    transport = request.transport
    if transport is not None:
        transport.abort()
    raise ConnectionReset()
