"""A Google Vertex AI emulator for Claude: ``:rawPredict`` / ``:streamRawPredict`` and OAuth.

Routes (matched on the raw, still-encoded path; the ``:verb`` is part of the last segment):

* ``POST /v1/projects/{p}/locations/{l}/publishers/anthropic/models/{model}:rawPredict`` (JSON)
  and ``...:streamRawPredict`` (Anthropic SSE, framed exactly as first party);
* ``POST /v1/projects/{p}/locations/{l}/publishers/anthropic/models/count-tokens:rawPredict``;
* ``POST /token``: the service-account token endpoint (:mod:`.google_oauth`);
* ``GET /v1beta1/publishers/anthropic/models``: Model Garden's list of the Claude models served
  (:mod:`.vertex_models`, which also holds the Vertex ids the predict routes accept); token
  checked as in step 1, a bad ``pageSize``/``pageToken`` is 400 ``INVALID_ARGUMENT``.

Checks, in order, and the shape of their errors:

1. ``Authorization: Bearer`` is a static ``vertex_tokens`` token or one ``/token`` issued and not
   yet expired on the emulator's clock -> else 401 ``UNAUTHENTICATED``; a token without the
   ``cloud-platform`` scope -> 403 ``PERMISSION_DENIED`` (google.rpc shape);
2. project in ``vertex_projects`` -> else 403 ``PERMISSION_DENIED``; location in
   ``vertex_locations`` and a known model -> else 404 ``NOT_FOUND`` (empty allowlists: any);
3. body size <= ``vertex_max_request_bytes`` -> else 400 ``INVALID_ARGUMENT`` ``The request size
   (N bytes) exceeds 30.000MB limit.``;
4. the verb agrees with the body's ``stream``: ``:streamRawPredict`` needs ``"stream": true`` and
   ``:rawPredict`` refuses it -> 400 ``INVALID_ARGUMENT`` (real Vertex's behaviour here is
   undocumented; the emulator is strict so a client that picks the wrong verb fails loudly);
5. model-server checks, Anthropic-shaped (as Vertex relays them): ``anthropic_version`` required
   (``vertex-2023-10-16`` or the installed SDK's ``ANTHROPIC_API_VERSION``); a body ``model`` on
   predict calls, ``tags`` (providers.md s10) and ``context_management`` (Claude Code's Vertex mode
   never sends it: 050/051, providers.md s7; [UNVERIFIED] against Vertex itself) are ``Extra
   inputs are not permitted``; a beta outside Vertex's list (:mod:`.cloud_betas`: what Claude
   Code's Vertex mode sends, and the 1M-context beta) is ``Unsupported beta header: <name>``;
   then the first-party body validation (which refuses a message's ``output_config`` without the
   first-party ``per-turn-control`` beta).

google.rpc errors are ``{"error":{"code","message","status"}}``, wrapped in a JSON array on
``:streamRawPredict`` (a server-streaming REST method answers a JSON array, errors included).
Scenario ``error:<status>`` for a platform status (401, 403, 404, 429, 503, 504) answers in the
google.rpc shape, e.g. 429 ``RESOURCE_EXHAUSTED`` with the quota message naming the base model and
the project; other statuses (400, 500, 529...) are model errors in Anthropic's envelope. The
response ``model`` is the first-party id of the Vertex model (``claude-sonnet-4-5-20250929``).
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass
from typing import Final

import orjson
from aiohttp import web
from aiohttp.typedefs import Handler

from .access_tokens import TOKENS_KEY, TokenRegistry, bearer_token, get_tokens
from .betas import parse_beta_header
from .catalog import ModelCatalog, ModelSpec
from .cloud_betas import VERTEX_BETAS, first_outside
from .config import EmulatorConfig
from .core import (
    MAX_BODY_BYTES,
    answer_count_tokens,
    answer_messages,
    record_and_render_errors,
    request_id_of,
    scenario_for,
)
from .errors import invalid_request
from .faults import apply_faults
from .google_oauth import TOKEN_PATH, handle_token
from .json_types import JSONObject
from .state import STATE_KEY, get_state, new_state
from .validation import Endpoint, parse_json_body, validate_body
from .versions import VERTEX_VERSION, accepted
from .vertex_models import PUBLISHER_MODELS_PATH, publisher_models_page, vertex_model

CLOUD_PLATFORM_SCOPE: Final = "https://www.googleapis.com/auth/cloud-platform"
COUNT_TOKENS_MODEL: Final = "count-tokens"
PLATFORM_STATUSES: Final = frozenset({401, 403, 404, 429, 503, 504})

GOOGLE_STATUS_NAMES: Final = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
UNAUTHENTICATED_MESSAGE: Final = (
    "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or "
    "other valid authentication credential. See "
    "https://developers.google.com/identity/sign-in/web/devconsole-project."
)

_ROUTE = re.compile(r"^/v1/projects/([^/]+)/locations/([^/]+)/publishers/anthropic/models/([^/]+)$")


class GoogleRpcError(Exception):
    """A platform error, rendered ``{"error":{"code","message","status"}}``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message

    def body(self) -> JSONObject:
        name = GOOGLE_STATUS_NAMES.get(self.status, "UNKNOWN")
        return {"error": {"code": self.status, "message": self.message, "status": name}}


@dataclass(frozen=True, slots=True)
class Route:
    project: str
    location: str
    model: str
    verb: str

    @property
    def resource(self) -> str:
        return f"projects/{self.project}/locations/{self.location}/publishers/anthropic/models/{self.model}"


def parse_route(raw_path: str) -> Route | None:
    """The parts of a predict path (percent-decoded), or ``None``."""
    match = _ROUTE.match(raw_path.partition("?")[0])
    if match is None:
        return None
    model, colon, verb = match.group(3).rpartition(":")
    if not colon:
        return None
    unquote = urllib.parse.unquote
    return Route(unquote(match.group(1)), unquote(match.group(2)), unquote(model), verb)


def accepted_versions() -> frozenset[str]:
    return accepted(VERTEX_VERSION)


def _check_token(request: web.Request, config: EmulatorConfig, tokens: TokenRegistry) -> None:
    token = bearer_token(request.headers.get("authorization"))
    if token is None:
        raise GoogleRpcError(401, UNAUTHENTICATED_MESSAGE)
    if token in config.vertex_tokens:
        return
    issued = tokens.lookup(token)
    if issued is None or issued.expires_at <= config.clock.time():
        raise GoogleRpcError(401, UNAUTHENTICATED_MESSAGE)
    if CLOUD_PLATFORM_SCOPE not in issued.scope.split():
        raise GoogleRpcError(403, "Request had insufficient authentication scopes.")


def _check_resource(route: Route, config: EmulatorConfig) -> None:
    if config.vertex_projects and route.project not in config.vertex_projects:
        raise GoogleRpcError(
            403,
            f"Permission 'aiplatform.endpoints.predict' denied on resource "
            f"'//aiplatform.googleapis.com/{route.resource}' (or it may not exist).",
        )
    if config.vertex_locations and route.location not in config.vertex_locations:
        raise GoogleRpcError(404, f"Publisher Model `{route.resource}` not found.")


def _spec(route: Route, model_id: str, catalog: ModelCatalog) -> ModelSpec:
    spec = vertex_model(catalog, model_id)
    if spec is None:
        missing = Route(route.project, route.location, model_id, route.verb)
        raise GoogleRpcError(404, f"Publisher Model `{missing.resource}` not found.")
    return spec


def _check_size(size: int, limit: int) -> None:
    if size > limit:
        raise GoogleRpcError(
            400, f"The request size ({size} bytes) exceeds {limit / (1024 * 1024):.3f}MB limit."
        )


def _model_server_body(body: JSONObject, endpoint: Endpoint) -> JSONObject:
    """Vertex's own body rules; returns the body without ``anthropic_version``."""
    version = body.get("anthropic_version")
    if version is None:
        raise invalid_request("anthropic_version: Field required")
    if version not in accepted_versions():
        raise invalid_request(f"anthropic_version: Input should be '{VERTEX_VERSION}'")
    if endpoint == "messages" and "model" in body:
        raise invalid_request("model: Extra inputs are not permitted")
    for key in ("tags", "context_management"):
        if key in body:
            raise invalid_request(f"{key}: Extra inputs are not permitted")
    return {key: value for key, value in body.items() if key != "anthropic_version"}


def _check_betas(values: list[str], config: EmulatorConfig) -> tuple[str, ...]:
    names = parse_beta_header(values)
    unsupported = first_outside(names, VERTEX_BETAS) if config.check_betas else None
    if unsupported is not None:
        raise invalid_request(f"Unsupported beta header: {unsupported}")
    return tuple(dict.fromkeys(names))


def _platform_error(route: Route, status: int) -> GoogleRpcError:
    if status == 429:
        base = "anthropic-" + route.model.partition("@")[0]
        return GoogleRpcError(
            429,
            f"Quota exceeded for aiplatform.googleapis.com/online_prediction_requests_per_base_model "
            f"with base model: {base} in project {route.project}. Please submit a quota increase "
            "request. https://cloud.google.com/vertex-ai/docs/generative-ai/quotas-genai.",
        )
    messages = {
        401: UNAUTHENTICATED_MESSAGE,
        403: f"Permission 'aiplatform.endpoints.predict' denied on resource "
        f"'//aiplatform.googleapis.com/{route.resource}' (or it may not exist).",
        404: f"Publisher Model `{route.resource}` not found.",
        503: "The service is currently unavailable.",
        504: "Deadline Exceeded",
    }
    return GoogleRpcError(status, messages[status])


async def handle_predict(request: web.Request) -> web.StreamResponse:
    state = get_state(request.app)
    config = state.config
    _check_token(request, config, get_tokens(request.app))
    route = parse_route(request.raw_path)
    if route is None or route.verb not in ("rawPredict", "streamRawPredict"):
        raise GoogleRpcError(404, "The requested URL was not found on this server.")
    _check_resource(route, config)
    counting = route.model == COUNT_TOKENS_MODEL
    if counting and route.verb != "rawPredict":
        raise GoogleRpcError(404, "The requested URL was not found on this server.")
    spec = None if counting else _spec(route, route.model, config.catalog)
    raw = await request.read()
    _check_size(len(raw), config.vertex_max_request_bytes)
    betas = _check_betas(request.headers.getall("anthropic-beta", []), config)
    endpoint: Endpoint = "count_tokens" if counting else "messages"
    body = _model_server_body(parse_json_body(raw), endpoint)
    if counting:
        model_id = body.get("model")
        if not isinstance(model_id, str):
            raise invalid_request("model: Field required")
        spec = _spec(route, model_id, config.catalog)
    else:
        streaming = body.get("stream") is True
        if streaming != (route.verb == "streamRawPredict"):
            raise GoogleRpcError(
                400,
                'Streaming requests must use :streamRawPredict with "stream": true; '
                ":rawPredict serves non-streaming requests only.",
            )
    assert spec is not None
    validated = validate_body({**body, "model": spec.id}, endpoint, config, betas)
    scenario = scenario_for(request, validated, config.default_scenario if not counting else "text")
    if scenario.name == "error" and scenario.error_status in PLATFORM_STATUSES:
        raise _platform_error(route, scenario.error_status)
    if counting:
        return await answer_count_tokens(request, validated, scenario)
    return await answer_messages(request, validated, scenario)


async def handle_publisher_models(request: web.Request) -> web.StreamResponse:
    config = get_state(request.app).config
    _check_token(request, config, get_tokens(request.app))
    page = publisher_models_page(
        config.catalog, request.query.get("pageSize"), request.query.get("pageToken")
    )
    if page is None:
        raise GoogleRpcError(400, "Invalid pageSize or pageToken.")
    return web.Response(body=orjson.dumps(page), content_type="application/json", charset="UTF-8")


async def handle_unknown(request: web.Request) -> web.StreamResponse:
    raise GoogleRpcError(404, "The requested URL was not found on this server.")


@web.middleware
async def _google_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except GoogleRpcError as error:
        body: object = error.body()
        if request.raw_path.partition("?")[0].endswith(":streamRawPredict"):
            body = [body]
        return web.Response(
            status=error.status,
            body=orjson.dumps(body),
            content_type="application/json",
            charset="UTF-8",
            headers={"x-request-id": request_id_of(request)},
        )


def create_app(config: EmulatorConfig | None = None) -> web.Application:
    """A fresh Vertex AI emulator app with its own prompt cache, request log and token registry."""
    config = config or EmulatorConfig()
    max_size = max(MAX_BODY_BYTES, config.vertex_max_request_bytes + 1024 * 1024)
    app = web.Application(
        middlewares=[record_and_render_errors, _google_errors, apply_faults], client_max_size=max_size
    )
    app[STATE_KEY] = new_state(config)
    app[TOKENS_KEY] = TokenRegistry()
    app.router.add_post(TOKEN_PATH, handle_token)
    app.router.add_post("/v1/projects/{tail:.+}", handle_predict)
    app.router.add_get(PUBLISHER_MODELS_PATH, handle_publisher_models)
    app.router.add_route("*", "/{tail:.*}", handle_unknown)
    return app
