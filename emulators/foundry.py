"""A Microsoft Foundry emulator: Claude behind Azure, first-party body and SSE.

Routes (query strings ignored):

* ``POST /anthropic/v1/messages`` and ``POST /anthropic/v1/messages/count_tokens``: first-party
  behaviour (validation, scripted model, prompt cache, SSE with ``ping``);
* the Entra ID endpoints of :mod:`.entra_oauth` (``/{tenant}/v2.0/.well-known/...``,
  ``/{tenant}/oauth2/v2.0/token``);
* anything else: Azure's 404 ``{"error":{"code":"404","message":"Resource not found"}}``.

Checks, in order:

1. credentials: ``x-api-key`` or ``api-key`` in ``foundry_api_keys``, or ``Authorization: Bearer``
   with a static ``foundry_entra_tokens`` token or an unexpired token the Entra endpoint issued for
   a Foundry scope -> else Azure's 401 (``{"error":{"code":"401","message":...}}``);
2. ``anthropic-version`` required -> 400 ``anthropic-version: header is required`` (Anthropic
   envelope, as Foundry answers); ``anthropic-beta`` as first party;
3. body (Anthropic envelope); ``model`` is a deployment name: a catalogue id or alias, else Azure's
   404 ``DeploymentNotFound``;
4. count_tokens with ``foundry_count_tokens=False`` -> Azure's ``api_not_supported``.

Scenario ``error:<status>`` for a platform status (401, 403, 404, 429, 502, 503, 504) answers with
an Azure gateway error (429 with ``retry-after``); other statuses (400, 500, 529...) are model
errors in Anthropic's envelope. Every response carries ``apim-request-id``.
"""

from __future__ import annotations

import uuid
from typing import Final

import orjson
from aiohttp import web
from aiohttp.typedefs import Handler

from .access_tokens import TOKENS_KEY, TokenRegistry, bearer_token, get_tokens
from .config import EmulatorConfig
from .core import (
    MAX_BODY_BYTES,
    answer_count_tokens,
    answer_messages,
    record_and_render_errors,
    scenario_for,
)
from .entra_oauth import FOUNDRY_SCOPES, add_entra_routes
from .faults import apply_faults
from .state import STATE_KEY, get_state, new_state
from .validation import Endpoint, ValidatedRequest, check_betas, check_version, parse_json_body, validate_body

PLATFORM_STATUSES: Final = frozenset({401, 403, 404, 429, 502, 503, 504})
KEY_DENIED: Final = (
    "Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid "
    "key for an active subscription and use a correct regional API endpoint for your resource."
)
TOKEN_DENIED: Final = (
    "Unauthorized. Access token is missing, invalid, audience is incorrect "
    "(https://cognitiveservices.azure.com), or have expired."
)
_PLATFORM_ERRORS: Final[dict[int, tuple[str, str]]] = {
    401: ("401", KEY_DENIED),
    403: ("PermissionDenied", "Principal does not have access to API/Operation."),
    404: ("404", "Resource not found"),
    429: ("429", "Rate limit is exceeded. Try again in {retry} seconds."),
    502: ("502", "Bad gateway."),
    503: (
        "ServiceUnavailable",
        "The service is temporarily unable to process your request. Please try again later.",
    ),
    504: ("Timeout", "The operation was timeout."),
}
_APIM_REQUEST_ID: web.RequestKey[str] = web.RequestKey("apim_request_id", str)


class AzureError(Exception):
    """An Azure gateway error, rendered ``{"error":{"code","message"}}``."""

    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = dict(headers or {})


def _check_credentials(request: web.Request, config: EmulatorConfig, tokens: TokenRegistry) -> None:
    headers = request.headers
    keys = [headers[name].strip() for name in ("x-api-key", "api-key") if name in headers]
    if any(key in config.foundry_api_keys for key in keys):
        return
    token = bearer_token(headers.get("authorization"))
    if token is None:
        raise AzureError(401, "401", KEY_DENIED)
    if token in config.foundry_entra_tokens:
        return
    issued = tokens.lookup(token)
    if issued is None or issued.expires_at <= config.clock.time() or issued.scope not in FOUNDRY_SCOPES:
        raise AzureError(401, "401", TOKEN_DENIED)


async def _validated(request: web.Request, endpoint: Endpoint) -> ValidatedRequest:
    state = get_state(request.app)
    config = state.config
    _check_credentials(request, config, get_tokens(request.app))
    check_version(request.headers.get("anthropic-version"), config)
    betas = check_betas(request.headers.getall("anthropic-beta", []), config)
    if endpoint == "count_tokens" and not config.foundry_count_tokens:
        raise AzureError(400, "api_not_supported", "Requested API is currently not supported")
    body = parse_json_body(await request.read())
    model = body.get("model")
    if isinstance(model, str) and config.catalog.resolve(model) is None:
        raise AzureError(
            404,
            "DeploymentNotFound",
            "The API deployment for this resource does not exist. If you created the deployment within "
            "the last 5 minutes, please wait a moment and try again.",
        )
    return validate_body(body, endpoint, config, betas)


def _platform_error(status: int, config: EmulatorConfig) -> AzureError:
    code, message = _PLATFORM_ERRORS[status]
    headers = {"retry-after": str(config.retry_after_s)} if status == 429 else {}
    return AzureError(status, code, message.format(retry=config.retry_after_s), headers)


async def handle_messages(request: web.Request) -> web.StreamResponse:
    config = get_state(request.app).config
    validated = await _validated(request, "messages")
    scenario = scenario_for(request, validated, config.default_scenario)
    if scenario.name == "error" and scenario.error_status in PLATFORM_STATUSES:
        raise _platform_error(scenario.error_status, config)
    return await answer_messages(request, validated, scenario)


async def handle_count_tokens(request: web.Request) -> web.StreamResponse:
    config = get_state(request.app).config
    validated = await _validated(request, "count_tokens")
    scenario = scenario_for(request, validated, "text")
    if scenario.name == "error" and scenario.error_status in PLATFORM_STATUSES:
        raise _platform_error(scenario.error_status, config)
    return await answer_count_tokens(request, validated, scenario)


async def handle_unknown(request: web.Request) -> web.StreamResponse:
    raise AzureError(404, "404", "Resource not found")


@web.middleware
async def _azure_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    request[_APIM_REQUEST_ID] = str(uuid.uuid4())
    try:
        return await handler(request)
    except AzureError as error:
        body = {"error": {"code": error.code, "message": error.message}}
        return web.Response(
            status=error.status,
            body=orjson.dumps(body),
            content_type="application/json",
            headers=error.headers,
        )


async def _add_apim_request_id(request: web.Request, response: web.StreamResponse) -> None:
    request_id = request.get(_APIM_REQUEST_ID)
    if request_id is not None:
        response.headers["apim-request-id"] = request_id


def create_app(config: EmulatorConfig | None = None) -> web.Application:
    """A fresh Foundry emulator app with its own prompt cache, request log and token registry."""
    config = config or EmulatorConfig()
    app = web.Application(
        middlewares=[record_and_render_errors, _azure_errors, apply_faults], client_max_size=MAX_BODY_BYTES
    )
    app[STATE_KEY] = new_state(config)
    app[TOKENS_KEY] = TokenRegistry()
    app.router.add_post("/anthropic/v1/messages", handle_messages)
    app.router.add_post("/anthropic/v1/messages/count_tokens", handle_count_tokens)
    add_entra_routes(app)
    app.router.add_route("*", "/{tail:.*}", handle_unknown)
    app.on_response_prepare.append(_add_apim_request_id)
    return app
