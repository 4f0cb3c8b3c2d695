"""One accounting scope per API request: opened when it arrives, closed once when its last byte is
sent or the client went away.

Every answer closes its scope exactly once, and the closing callback writes the one access-log
line and the one ``gateway_requests_total`` sample. The scope is outermost (outside the error
middleware); a client's own input is never counted as an upstream error.

Details: docs/internals/gateway.md
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

import aiohttp
from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from gateway.errors import error_type_of
from gateway.fleet.principal import Principal
from gateway.outcome import Outcome
from gateway.providers.base import ClientRequest, Operation
from gateway.write_stall import may_wait, send_bounded, stall_failure

if TYPE_CHECKING:
    from gateway.fleet.policy_gate import Admission

API_PATHS: Final[Mapping[str, Operation]] = {
    "/v1/messages": Operation.MESSAGES,
    "/v1/messages/count_tokens": Operation.COUNT_TOKENS,
}
_CLIENT_GONE: Final = (ConnectionResetError, aiohttp.ClientConnectionResetError)
CLIENT_CLOSED_REQUEST: Final = 499  # nginx's "client closed request": it left before any answer


@dataclass(slots=True)
class RequestScope:
    """What one API request's accounting needs; filled in by the handler as it learns more."""

    operation: Operation
    request_id: str
    started: float
    outcome: Outcome = field(default_factory=Outcome)
    client: ClientRequest | None = None  # set once the body is parsed
    team: str = ""  # set once the caller is authenticated
    principal: Principal | None = None  # who the caller is, once authenticated
    upstream_error: str | None = None  # the error type, when the failure is the upstream's
    provider: str | None = None  # several upstreams (issue 18): the provider that answered
    admission: Admission | None = None  # the fleet policy's decision (GATEWAY_POLICY_FILE), recorded at close

    def request(self) -> ClientRequest:
        """The parsed request, or an empty stand-in (no model, no body) when it never was."""
        if self.client is not None:
            return self.client
        return ClientRequest(self.operation, b"", {}, [], self.request_id)


SCOPE_KEY: Final = web.RequestKey("accounting_scope", RequestScope)


def client_left(scope: RequestScope) -> None:
    """Complete the outcome of a request whose client went away (``client_disconnected``).

    The status is the one the client never saw: what was being sent (200 for a stream cut
    mid-way, the upstream's status for a buffered answer), or ``CLIENT_CLOSED_REQUEST`` when no
    answer existed yet; ``failure`` says when it left, unless something already said why.
    """
    outcome = scope.outcome
    if outcome.status == 0:
        outcome.status = CLIENT_CLOSED_REQUEST
        if scope.client is None:
            when = "before its request was read"
        elif outcome.upstream_started_at is None:
            when = "before its request was sent upstream"
        else:  # a retry in progress is named by the retry loop (Gateway._attempt)
            when = outcome.failure or "while waiting for the upstream"
        outcome.failure = f"client disconnected {when}"
    elif outcome.failure is None:
        outcome.failure = "client disconnected"


def accounting_middleware(
    close: Callable[[RequestScope], None],
    new_request_id: Callable[[], str],
    clock: Callable[[], float],
    *,
    write_stall_s: float | None = None,
) -> Middleware:
    """The middleware that opens a scope for each API request and calls ``close`` once for it.

    ``write_stall_s``: how long sending a whole answer may wait for the client to take it before
    its connection is closed (``None``: unbounded; see ``gateway.write_stall.send_bounded``).
    """

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        operation = API_PATHS.get(request.path)
        if operation is None:
            return await handler(request)
        scope = RequestScope(operation, new_request_id(), clock())
        request[SCOPE_KEY] = scope
        outcome = scope.outcome
        try:
            response = await handler(request)
            if not response.prepared:  # a whole answer: send it here so the scope sees it go out
                outcome.status = response.status
                if response.status >= 400 and outcome.error_type is None:
                    body = response.body if isinstance(response, web.Response) else None
                    outcome.error_type = error_type_of(
                        body if isinstance(body, bytes) else b"", response.status
                    )
                try:
                    if write_stall_s is None or not may_wait(response):
                        await response.prepare(request)
                        await response.write_eof()
                    elif (stalled := await send_bounded(response, request, write_stall_s)) is not None:
                        outcome.client_disconnected = True  # it stopped reading: let it go
                        outcome.failure = stall_failure(stalled)
                        if request.transport is not None:
                            request.transport.abort()
                except _CLIENT_GONE:
                    outcome.client_disconnected = True
            return response
        except BaseException:
            # the error middleware answers every Exception, so this is a cancellation (shutdown,
            # or the client gone while the handler waited: aiohttp cancels the handler then)
            transport = request.transport
            if transport is None or transport.is_closing():
                outcome.client_disconnected = True
            raise
        finally:
            if outcome.client_disconnected:
                client_left(scope)
            close(scope)

    return middleware
