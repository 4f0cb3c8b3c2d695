"""The AWS Bedrock runtime emulator (InvokeModel, InvokeModelWithResponseStream, CountTokens).

Routes, matched on the **raw** path (model ids contain ``:`` and ``%2F``; a framework's decoded
path would split an ARN at its ``/``):

* ``POST /model/{modelId}/invoke``: the Message JSON plus ``X-Amzn-Bedrock-Input-Token-Count``,
  ``-Output-Token-Count``, ``-Cache-Read-Input-Token-Count``, ``-Cache-Write-Input-Token-Count``
  and ``-Invocation-Latency`` headers;
* ``POST /model/{modelId}/invoke-with-response-stream``: ``application/vnd.amazon.eventstream``
  frames (``chunk`` events carrying base64 Anthropic events, no ``ping``; ``message_stop`` has
  ``amazon-bedrock-invocationMetrics``); ``stream_error`` sends an exception frame after the first
  delta (``modelStreamErrorException`` unless ``x-emulator-stream-exception`` names another);
* ``POST /model/{foundationModelId}/count-tokens``: ``{"input":{"invokeModel":{"body":<base64>}}}``
  -> ``{"inputTokens": N}`` (the shared token rule);
* ``GET /inference-profiles`` and ``GET /foundation-models``: the control-plane lists of what the
  routes above serve (:mod:`.bedrock_control`; Claude Code's Bedrock mode calls the first);
* ``POST /`` and ``GET /container-credentials``: STS and container credentials (:mod:`.sts`);
* anything else: 404 ``UnknownOperationException``.

Model routes check credentials first (:mod:`.bedrock_sigv4`), then the model (unknown: 404
``ResourceNotFoundException``), then the body and the ``anthropic-beta`` header
(:mod:`.bedrock_body`, with Bedrock's own beta lists from :mod:`.cloud_betas`). Scenarios, the scripted
model, limits, the prompt cache and the request log are the first-party emulator's (shared
``EmulatorState`` under ``STATE_KEY``, so ``RunningEmulator.requests``/``cache``/``clock`` work).
Errors: ``x-amzn-ErrorType`` + ``x-amzn-RequestId`` + ``{"message"}`` (:mod:`.bedrock_exceptions`).
"""

from __future__ import annotations

import base64
import binascii
import logging
import secrets
import uuid
from typing import Any, Final
from urllib.parse import unquote

import orjson
from aiohttp import web
from aiohttp.typedefs import Handler

from .bedrock_body import parse_object, validate_invoke
from .bedrock_config import BEDROCK_STATE_KEY, BedrockOptions, BedrockState, get_bedrock_state
from .bedrock_control import CONTROL_PATHS, handle_control
from .bedrock_exceptions import (
    BedrockError,
    exception_for_status,
    from_api_error,
    stream_code,
    stream_member,
    validation,
)
from .bedrock_frames import chunk_frame, exception_frame
from .bedrock_models import resolve_foundation_model, resolve_model
from .bedrock_sigv4 import authenticate
from .config import EmulatorConfig
from .conversation import prompt_text
from .core import record_request
from .errors import ApiError, is_retryable
from .events import Turn, render_message, render_stream
from .faults import apply_faults, plan_of
from .json_types import JSONObject
from .limits import apply_limits
from .scenarios import SCENARIO_HEADER, TOOL_HEADER, TOOLS_HEADER, Scenario, select_scenario
from .scripted_model import respond
from .state import STATE_KEY, EmulatorState, get_state, new_state
from .sts import CONTAINER_CREDENTIALS_PATH, CredentialIssuer, handle_container, handle_sts
from .validation import ValidatedRequest

log = logging.getLogger(__name__)

MAX_BODY_BYTES: Final = 32 * 1024 * 1024
EVENT_STREAM: Final = "application/vnd.amazon.eventstream"
STREAM_EXCEPTION_HEADER: Final = "x-emulator-stream-exception"
ACTIONS: Final = frozenset({"invoke", "invoke-with-response-stream", "count-tokens"})
_REQUEST_ID: web.RequestKey[str] = web.RequestKey("bedrock_request_id", str)
_STARTED: web.RequestKey[float] = web.RequestKey("bedrock_started", float)


def _error_response(request: web.Request, error: BedrockError) -> web.Response:
    headers = {
        "x-amzn-RequestId": request[_REQUEST_ID],
        "x-amzn-ErrorType": error.error_type_header,
        **error.headers,
    }
    return web.Response(
        status=error.status, body=orjson.dumps(error.body()), content_type="application/json", headers=headers
    )


def _scenario_error(config: EmulatorConfig, error: ApiError) -> BedrockError:
    bedrock = from_api_error(error)
    if error.status == 429:
        bedrock.headers["retry-after"] = str(config.retry_after_s)
    if config.retry_after_ms is not None and is_retryable(error.status):
        bedrock.headers["retry-after-ms"] = f"{config.retry_after_ms:g}"
    return bedrock


@web.middleware
async def _record_and_render_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    state = get_state(request.app)
    request[_REQUEST_ID] = str(uuid.uuid4())
    request[_STARTED] = state.config.clock.time()
    refused = await record_request(request, state, request[_STARTED])
    try:
        if refused is not None and refused.status == 413:
            raise validation("Input is too long.")
        if refused is not None:
            raise validation("Malformed input request, please reformat your input and try again.")
        return await handler(request)
    except BedrockError as error:
        return _error_response(request, error)
    except ApiError as error:
        return _error_response(request, _scenario_error(state.config, error))


async def dispatch(request: web.Request) -> web.StreamResponse:
    path = request.raw_path.partition("?")[0]
    bedrock = get_bedrock_state(request.app)
    if path == "/" and request.method == "POST":
        return await handle_sts(request, bedrock.issuer, bedrock.options.web_identity_tokens)
    if path == CONTAINER_CREDENTIALS_PATH and request.method == "GET":
        return handle_container(request, bedrock.issuer, bedrock.options.container_token)
    if path in CONTROL_PATHS and request.method == "GET":
        return await handle_control(request, path, request[_REQUEST_ID])
    parts = path.split("/")
    if len(parts) == 4 and parts[1] == "model" and parts[3] in ACTIONS and request.method == "POST":
        return await _handle_model(request, unquote(parts[2]), parts[3])
    raise BedrockError("UnknownOperationException")


async def _handle_model(request: web.Request, model_id: str, action: str) -> web.StreamResponse:
    state = get_state(request.app)
    bedrock = get_bedrock_state(request.app)
    raw = await request.read()
    authenticate(
        method=request.method,
        raw_path=request.raw_path,
        headers=request.headers,
        body=raw,
        options=bedrock.options,
        issuer=bedrock.issuer,
        now=state.config.clock.time(),
    )
    if action == "count-tokens":
        return await _count_tokens(request, state, model_id, raw)
    spec = resolve_model(model_id, state.config.catalog, bedrock.options.inference_profiles)
    if spec is None:
        raise BedrockError("ResourceNotFoundException", f"Could not resolve the model {model_id!r}.")
    stream = action == "invoke-with-response-stream"
    validated = validate_invoke(
        parse_object(raw), spec, state.config, stream=stream, header_betas=_header_betas(request)
    )
    scenario = _scenario(request, validated, state.config.default_scenario)
    output = apply_limits(
        respond(validated, scenario),
        max_tokens=validated.body["max_tokens"],
        stop_sequences=validated.body.get("stop_sequences") or (),
    )
    cache = state.cache.apply(validated.model, validated.prompt)
    turn = Turn("msg_bdrk_" + secrets.token_hex(12), spec.id, output, cache)
    if stream:
        return await _stream(request, state, bedrock, turn)
    usage = turn.cache
    latency_ms = _elapsed_ms(request, state)
    headers = {
        "x-amzn-RequestId": request[_REQUEST_ID],
        "X-Amzn-Bedrock-Invocation-Latency": str(latency_ms),
        "X-Amzn-Bedrock-Input-Token-Count": str(usage.input_tokens),
        "X-Amzn-Bedrock-Output-Token-Count": str(turn.output_tokens),
        "X-Amzn-Bedrock-Cache-Read-Input-Token-Count": str(usage.cache_read_input_tokens),
        "X-Amzn-Bedrock-Cache-Write-Input-Token-Count": str(usage.cache_creation_input_tokens),
    }
    return web.Response(
        body=orjson.dumps(render_message(turn)), content_type="application/json", headers=headers
    )


def _header_betas(request: web.Request) -> list[str]:
    return request.headers.getall("anthropic-beta", [])


def _scenario(request: web.Request, validated: ValidatedRequest, default: str) -> Scenario:
    headers = request.headers
    return select_scenario(
        prompt_text(validated.body["messages"]),
        default=default,
        header_scenario=headers.get(SCENARIO_HEADER),
        header_tool=headers.get(TOOL_HEADER),
        header_tools=headers.get(TOOLS_HEADER),
    )


def _elapsed_ms(request: web.Request, state: EmulatorState) -> int:
    return max(0, round((state.config.clock.time() - request[_STARTED]) * 1000))


async def _stream(
    request: web.Request, state: EmulatorState, bedrock: BedrockState, turn: Turn
) -> web.StreamResponse:
    headers = {
        "x-amzn-RequestId": request[_REQUEST_ID],
        "Content-Type": EVENT_STREAM,
        "X-Amzn-Bedrock-Content-Type": "application/json",
    }
    response = web.StreamResponse(status=200, headers=headers)
    await response.prepare(request)
    config = state.config
    member = request.headers.get(STREAM_EXCEPTION_HEADER) or bedrock.options.stream_exception
    first_byte_ms: int | None = None
    faults = plan_of(request)
    sent = 0
    try:
        for event in render_stream(turn):
            kind = event["type"]
            if config.chunk_delay_s > 0 and kind == "content_block_delta":
                await config.clock.sleep(config.chunk_delay_s)
            if kind == "error":
                frame = _exception_frame(member)
            elif kind == "message_stop":
                frame = chunk_frame(
                    _with_metrics(event, turn, _elapsed_ms(request, state), first_byte_ms or 0)
                )
            else:
                frame = chunk_frame(event)
            if first_byte_ms is None:
                first_byte_ms = _elapsed_ms(request, state)
            await response.write(frame)
            sent += 1
            if not await faults.after_event(sent, request, config.clock, None):  # no pings on Bedrock
                failure = faults.stream_error(sent)  # ``overloaded_after``: the overload as a frame
                if failure is not None:
                    await response.write(_exception_frame(stream_member(exception_for_status(529))))
                break
        await response.write_eof()
    except ConnectionResetError:
        log.debug("client went away mid-stream (request %s)", request[_REQUEST_ID])
    return response


def _exception_frame(member: str) -> bytes:
    error = BedrockError(stream_code(member))
    extra: dict[str, Any] = {}
    if member == "modelStreamErrorException":
        extra = {"originalStatusCode": 500, "originalMessage": "Internal server error"}
    return exception_frame(stream_member(error.code), error.text, **extra)


def _with_metrics(event: JSONObject, turn: Turn, latency_ms: int, first_byte_ms: int) -> JSONObject:
    return {
        **event,
        "amazon-bedrock-invocationMetrics": {
            "inputTokenCount": turn.cache.input_tokens,
            "outputTokenCount": turn.output_tokens,
            "invocationLatency": latency_ms,
            "firstByteLatency": first_byte_ms,
        },
    }


async def _count_tokens(
    request: web.Request, state: EmulatorState, model_id: str, raw: bytes
) -> web.Response:
    spec = resolve_foundation_model(model_id, state.config.catalog)
    if spec is None:
        raise validation("The provided model identifier is invalid.")
    encoded = _count_tokens_input(parse_object(raw))
    try:
        decoded = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise validation("Invalid base64 in input.invokeModel.body") from None
    validated = validate_invoke(
        parse_object(decoded), spec, state.config, stream=False, header_betas=_header_betas(request)
    )
    scenario = _scenario(request, validated, "text")
    if scenario.name == "error" and scenario.error_status is not None:
        raise ApiError(scenario.error_status)
    total = validated.prompt.total_tokens
    return web.Response(
        body=orjson.dumps({"inputTokens": total}),
        content_type="application/json",
        headers={"x-amzn-RequestId": request[_REQUEST_ID]},
    )


def _count_tokens_input(wrapper: JSONObject) -> str:
    """The base64 invoke body of a CountTokens request."""
    section = wrapper.get("input")
    invoke = section.get("invokeModel") if isinstance(section, dict) else None
    encoded = invoke.get("body") if isinstance(invoke, dict) else None
    if not isinstance(encoded, str):
        raise validation(
            "1 validation error detected: Value at 'input.invokeModel.body' failed to satisfy "
            "constraint: Member must not be null"
        )
    return encoded


def create_app(
    config: EmulatorConfig | None = None, options: BedrockOptions | None = None
) -> web.Application:
    """A fresh Bedrock emulator app with its own prompt cache, request log and issued credentials."""
    config = config or EmulatorConfig()
    options = options or BedrockOptions()
    app = web.Application(
        middlewares=[_record_and_render_errors, apply_faults], client_max_size=MAX_BODY_BYTES
    )
    app[STATE_KEY] = new_state(config)
    app[BEDROCK_STATE_KEY] = BedrockState(options, CredentialIssuer(config.clock, options.issued_lifetime_s))
    app.router.add_route("*", "/{tail:.*}", dispatch)
    return app
