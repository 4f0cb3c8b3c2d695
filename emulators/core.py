"""The shared core of the emulator apps: recording, the Anthropic error envelope, and answering a
validated Messages / count_tokens request with the scripted model (JSON, or SSE framed by
:mod:`.events`, the emulators' own encoder). Each provider's module (:mod:`.first_party`,
:mod:`.bedrock`, :mod:`.vertex`, :mod:`.foundry`) adds its routes, credentials and error shape.
"""

from __future__ import annotations

import logging

import orjson
from aiohttp import web
from aiohttp.typedefs import Handler
from aiohttp.web_protocol import RequestPayloadError

from .config import EmulatorConfig
from .conversation import prompt_text
from .errors import ApiError, invalid_request
from .events import PING_FRAME, Turn, new_message_id, render_message, render_stream, sse_frame
from .faults import plan_of
from .json_types import JSONObject
from .limits import apply_limits
from .recorder import RecordedRequest
from .response_headers import base_headers, error_headers, new_request_id
from .scenarios import SCENARIO_HEADER, TOOL_HEADER, TOOLS_HEADER, Scenario, select_scenario
from .scripted_model import respond
from .state import EmulatorState, get_state
from .validation import (
    Endpoint,
    ValidatedRequest,
    check_auth,
    check_betas,
    check_version,
    parse_json_body,
    validate_body,
)
from .window import check_window

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 32 * 1024 * 1024
"""The first-party API's body cap (providers.md section 5: 413 ``request_too_large``, 32 MB);
``EmulatorConfig.max_body_bytes`` sets the first-party app's."""
SSE_CONTENT_TYPE = "text/event-stream; charset=utf-8"
_REQUEST_ID: web.RequestKey[str] = web.RequestKey("emulator_request_id", str)


def json_response(
    state: EmulatorState,
    request: web.Request,
    status: int,
    payload: JSONObject,
    extra: dict[str, str] | None = None,
    *,
    input_tokens: int = 0,
    output_tokens: int = 0,
) -> web.Response:
    headers = base_headers(
        state.config, request[_REQUEST_ID], input_tokens=input_tokens, output_tokens=output_tokens
    )
    headers.update(extra or {})
    return web.Response(
        status=status, body=orjson.dumps(payload), content_type="application/json", headers=headers
    )


def error_response(state: EmulatorState, request: web.Request, error: ApiError) -> web.Response:
    return json_response(
        state, request, error.status, error.body(request[_REQUEST_ID]), error_headers(state.config, error)
    )


def request_id_of(request: web.Request) -> str:
    """The ``request-id`` the recording middleware gave ``request``."""
    return request[_REQUEST_ID]


async def record_request(request: web.Request, state: EmulatorState, timestamp: float) -> ApiError | None:
    """Append ``request`` (raw path, headers as received, body) to the log; the error to answer
    when its body could not be read (recorded empty): over the size limit, or unreadable."""
    refused: ApiError | None = None
    try:
        body = await request.read()
    except web.HTTPRequestEntityTooLarge:
        body, refused = b"", ApiError(413)
    except RequestPayloadError:
        # a body aiohttp's parser could not decode (corrupt gzip/deflate under its
        # Content-Encoding, a broken chunked framing): a malformed request is a 400 (RFC 9110
        # section 15.5.1), an invalid_request_error like any body the API cannot read, never a
        # 5xx a client would retry
        body, refused = b"", invalid_request("There was an issue with the format or content of your request.")
    state.log.append(
        RecordedRequest(
            method=request.method,
            path=request.raw_path,
            headers=tuple(
                (k.decode("utf-8", "surrogateescape"), v.decode("utf-8", "surrogateescape"))
                for k, v in request.raw_headers
            ),
            body=body,
            timestamp=timestamp,
        )
    )
    return refused


@web.middleware
async def record_and_render_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Record every request, then render :class:`ApiError` in the Anthropic envelope.

    Platform apps (Vertex, Foundry) put it first and add their own middleware after it for
    errors in their platform's shape.
    """
    state = get_state(request.app)
    request[_REQUEST_ID] = new_request_id()
    refused = await record_request(request, state, state.config.clock.time())
    try:
        if refused is not None:
            raise refused
        return await handler(request)
    except ApiError as error:
        return error_response(state, request, error)
    except web.HTTPException as exc:
        if exc.status == 404:
            return error_response(state, request, ApiError(404, "Not Found"))
        if exc.status == 405:
            return error_response(
                state, request, ApiError(405, "Method Not Allowed", error_type="invalid_request_error")
            )
        raise


def check_headers(request: web.Request, config: EmulatorConfig) -> tuple[str, ...]:
    headers = request.headers
    check_auth(headers.get("x-api-key"), headers.get("authorization"), config)
    check_version(headers.get("anthropic-version"), config)
    return check_betas(headers.getall("anthropic-beta", []), config)


async def validated_request(request: web.Request, endpoint: Endpoint) -> ValidatedRequest:
    state = get_state(request.app)
    betas = check_headers(request, state.config)
    body = parse_json_body(await request.read())
    return validate_body(body, endpoint, state.config, betas)


def scenario_for(request: web.Request, validated: ValidatedRequest, default: str) -> Scenario:
    """The scenario a request selects (header, prompt marker, else ``default``)."""
    headers = request.headers
    return select_scenario(
        prompt_text(validated.body["messages"]),
        default=default,
        header_scenario=headers.get(SCENARIO_HEADER),
        header_tool=headers.get(TOOL_HEADER),
        header_tools=headers.get(TOOLS_HEADER),
    )


async def answer_messages(
    request: web.Request, validated: ValidatedRequest, scenario: Scenario
) -> web.StreamResponse:
    """Run the scripted model for a validated Messages request; answer JSON, or SSE if streaming.

    A prompt longer than the model's context window is refused first (:mod:`.window`)."""
    state = get_state(request.app)
    body = validated.body
    check_window(validated.prompt.total_tokens, validated.model, validated.betas)
    output = apply_limits(
        respond(validated, scenario),
        max_tokens=body["max_tokens"],
        stop_sequences=body.get("stop_sequences") or (),
    )
    cache = state.cache.apply(validated.model, validated.prompt)
    turn = Turn(new_message_id(), body["model"], output, cache)
    if not validated.stream:
        return json_response(
            state,
            request,
            200,
            render_message(turn),
            input_tokens=cache.total_input_tokens,
            output_tokens=turn.output_tokens,
        )
    return await _stream(state, request, turn)


async def _stream(state: EmulatorState, request: web.Request, turn: Turn) -> web.StreamResponse:
    headers = base_headers(
        state.config,
        request[_REQUEST_ID],
        input_tokens=turn.cache.total_input_tokens,
        output_tokens=turn.output_tokens,
    )
    headers.update({"Content-Type": SSE_CONTENT_TYPE, "Cache-Control": "no-cache"})
    response = web.StreamResponse(status=200, headers=headers)
    await response.prepare(request)
    delay = state.config.chunk_delay_s
    clock = state.config.clock
    faults = plan_of(request)
    sent = 0

    async def ping() -> None:
        await response.write(PING_FRAME)

    try:
        for index, event in enumerate(render_stream(turn)):
            if delay > 0 and event["type"] == "content_block_delta":
                await clock.sleep(delay)
            frames = [sse_frame(event["type"], event)]
            if index == 0:
                frames.append(PING_FRAME)
            for frame in frames:
                await response.write(frame)
                sent += 1
                if not await faults.after_event(sent, request, clock, ping):
                    failure = faults.stream_error(sent)
                    if failure is not None:
                        await response.write(sse_frame("error", failure))
                    await response.write_eof()
                    return response
        await response.write_eof()
    except ConnectionResetError:
        log.debug("client went away mid-stream (request %s)", request[_REQUEST_ID])
    return response


async def answer_count_tokens(
    request: web.Request, validated: ValidatedRequest, scenario: Scenario
) -> web.StreamResponse:
    """``{"input_tokens": N}`` for a validated count_tokens request."""
    state = get_state(request.app)
    if scenario.name == "error" and scenario.error_status is not None:
        raise ApiError(scenario.error_status)
    total = validated.prompt.total_tokens
    return json_response(state, request, 200, {"input_tokens": total}, input_tokens=total)
