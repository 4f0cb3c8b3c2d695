"""The first-party Anthropic API emulator (``api.anthropic.com``) as an aiohttp application.

Routes (any query string, e.g. ``?beta=true``, is ignored):

* ``POST /v1/messages``: JSON Message, or SSE when the body has ``"stream": true``;
* ``POST /v1/messages/count_tokens``: ``{"input_tokens": N}``;
* ``GET /v1/models`` and ``GET /v1/models/{model_id}``.

Every request is recorded (see :mod:`.recorder`) before anything else happens. Every response
carries ``request-id`` and the rate-limit headers; errors use the Anthropic envelope. The wire
layer only: recording and answering are :mod:`.core`'s, shared with the other providers' apps.
"""

from __future__ import annotations

from aiohttp import web

from .config import EmulatorConfig
from .core import (
    answer_count_tokens,
    answer_messages,
    check_headers,
    json_response,
    record_and_render_errors,
    scenario_for,
    validated_request,
)
from .errors import ApiError
from .faults import apply_faults
from .json_types import JSONObject
from .state import STATE_KEY, get_state, new_state


async def handle_messages(request: web.Request) -> web.StreamResponse:
    state = get_state(request.app)
    validated = await validated_request(request, "messages")
    return await answer_messages(
        request, validated, scenario_for(request, validated, state.config.default_scenario)
    )


async def handle_count_tokens(request: web.Request) -> web.StreamResponse:
    validated = await validated_request(request, "count_tokens")
    return await answer_count_tokens(request, validated, scenario_for(request, validated, "text"))


async def handle_list_models(request: web.Request) -> web.StreamResponse:
    state = get_state(request.app)
    check_headers(request, state.config)
    data = [spec.to_model_info() for spec in state.config.catalog]
    payload: JSONObject = {
        "data": data,
        "has_more": False,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
    }
    return json_response(state, request, 200, payload)


async def handle_get_model(request: web.Request) -> web.StreamResponse:
    state = get_state(request.app)
    check_headers(request, state.config)
    model_id = request.match_info["model_id"]
    spec = state.config.catalog.resolve(model_id)
    if spec is None:
        raise ApiError(404, f"model: {model_id}")
    return json_response(state, request, 200, spec.to_model_info())


def create_app(config: EmulatorConfig | None = None) -> web.Application:
    """A fresh first-party emulator app with its own prompt cache and request log."""
    config = config or EmulatorConfig()
    app = web.Application(
        middlewares=[record_and_render_errors, apply_faults], client_max_size=config.max_body_bytes
    )
    app[STATE_KEY] = new_state(config)
    app.router.add_post("/v1/messages", handle_messages)
    app.router.add_post("/v1/messages/count_tokens", handle_count_tokens)
    app.router.add_get("/v1/models", handle_list_models)
    app.router.add_get("/v1/models/{model_id}", handle_get_model)
    return app
