"""The real anthropic SDK (sync and async) -> gateway -> emulator, on real sockets."""

from __future__ import annotations

import anthropic
import orjson
import pytest
import requests

from tests.support.sdk_stack import GATEWAY_KEY, METRICS_KEY, TEAM_KEY, UPSTREAM_KEY, Stack, StackFactory

MODEL = "claude-sonnet-4-6"
USER = [{"role": "user", "content": "Hello there"}]
TOOLS = [
    {
        "name": "get_weather",
        "description": "Weather for a city",
        "input_schema": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    }
]


def header(recorded: object, name: str) -> str | None:
    for key, value in recorded.headers:  # type: ignore[attr-defined]
        if key.lower() == name:
            return value  # type: ignore[no-any-return]
    return None


def test_create_through_gateway(stack: Stack) -> None:
    raw = stack.client().messages.with_raw_response.create(model=MODEL, max_tokens=256, messages=USER)
    message = raw.parse()
    assert message.type == "message" and message.stop_reason == "end_turn"
    assert message.content[0].type == "text" and message.content[0].text
    assert message.usage.input_tokens > 0 and message.usage.output_tokens > 0

    # request ids: the gateway's x-client-request-id goes upstream and back; the upstream's comes back
    (upstream,) = stack.requests
    assert raw.headers["x-client-request-id"] == header(upstream, "x-client-request-id")
    assert raw.headers["request-id"].startswith("req_")
    # the client's key never leaves the gateway; the upstream key replaces it
    assert header(upstream, "x-api-key") == UPSTREAM_KEY
    assert header(upstream, "authorization") is None
    assert GATEWAY_KEY.encode() not in b"".join(v.encode() for _, v in upstream.headers)
    # nothing to change: the bytes the client sent are the bytes the upstream got
    assert orjson.loads(upstream.body) == {"model": MODEL, "max_tokens": 256, "messages": USER}


def test_stream_final_message(stack: Stack) -> None:
    with stack.client().messages.stream(model=MODEL, max_tokens=256, messages=USER) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text and final.content[0].text == text  # type: ignore[union-attr]
    assert final.stop_reason == "end_turn"
    direct = anthropic.Anthropic(api_key=UPSTREAM_KEY, base_url=stack.emulator.base_url, max_retries=0)  # type: ignore[attr-defined]
    expected = direct.messages.create(model=MODEL, max_tokens=256, messages=USER)
    assert [b.model_dump(exclude={"parsed_output"}) for b in final.content] == [
        b.model_dump() for b in expected.content
    ]
    assert final.usage.output_tokens == expected.usage.output_tokens
    assert final.usage.input_tokens + (
        final.usage.cache_read_input_tokens or 0
    ) == expected.usage.input_tokens + (expected.usage.cache_read_input_tokens or 0)


async def test_async_client_stream_and_create(stack: Stack) -> None:
    client = stack.async_client()
    message = await client.messages.create(model=MODEL, max_tokens=128, messages=USER)
    async with client.messages.stream(model=MODEL, max_tokens=128, messages=USER) as stream:
        final = await stream.get_final_message()
    assert final.content[0].text == message.content[0].text  # type: ignore[union-attr]
    await client.close()


def test_count_tokens(stack: Stack) -> None:
    client = stack.client()
    counted = client.messages.count_tokens(model=MODEL, messages=USER, tools=TOOLS)  # type: ignore[arg-type]
    created = client.messages.create(model=MODEL, max_tokens=64, messages=USER, tools=TOOLS)  # type: ignore[arg-type]
    usage = created.usage
    total = (
        usage.input_tokens + (usage.cache_read_input_tokens or 0) + (usage.cache_creation_input_tokens or 0)
    )
    assert counted.input_tokens == total
    assert stack.requests[0].path.startswith("/v1/messages/count_tokens")


def test_tool_use_round_trip(stack: Stack) -> None:
    client = stack.client()
    first = client.messages.create(
        model=MODEL,
        max_tokens=256,
        tools=TOOLS,  # type: ignore[arg-type]
        messages=[{"role": "user", "content": "Weather in Paris? [[scenario:tool_use]]"}],
    )
    assert first.stop_reason == "tool_use"
    (tool_use,) = [block for block in first.content if block.type == "tool_use"]
    assert tool_use.name == "get_weather" and "city" in tool_use.input  # type: ignore[operator]
    with client.messages.stream(
        model=MODEL,
        max_tokens=256,
        tools=TOOLS,  # type: ignore[arg-type]
        messages=[
            {"role": "user", "content": "Weather in Paris? [[scenario:tool_use]]"},
            {"role": "assistant", "content": first.content},  # type: ignore[typeddict-item]
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": tool_use.id, "content": "18C and sunny"}],
            },
        ],
    ) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "end_turn"
    assert final.content[0].type == "text"


def test_streamed_tool_input_arrives_whole(stack: Stack) -> None:
    with stack.client().messages.stream(
        model=MODEL,
        max_tokens=256,
        tools=TOOLS,  # type: ignore[arg-type]
        messages=[{"role": "user", "content": "go"}],
        extra_headers={"x-emulator-scenario": "tool_use"},
    ) as stream:
        final = stream.get_final_message()
    (tool_use,) = [b for b in final.content if b.type == "tool_use"]
    assert isinstance(tool_use.input, dict) and tool_use.input.get("city")


@pytest.mark.parametrize("version", ["2023-06-01", "2026-10-21"])
def test_both_version_strings_forwarded_as_sent(stack: Stack, version: str) -> None:
    client = stack.client(default_headers={"anthropic-version": version})
    client.messages.create(model=MODEL, max_tokens=32, messages=USER)
    assert header(stack.requests[-1], "anthropic-version") == version


def test_missing_version_defaults(stack: Stack) -> None:
    response = requests.post(
        stack.gateway_url + "/v1/messages",
        headers={"x-api-key": GATEWAY_KEY, "content-type": "application/json"},
        data=orjson.dumps({"model": MODEL, "max_tokens": 16, "messages": USER}),
        timeout=30,
    )
    assert response.status_code == 200
    assert header(stack.requests[-1], "anthropic-version") == "2023-06-01"


@pytest.mark.parametrize("path", ["/v1/messages?beta=true", "/v1/messages/count_tokens?beta=true"])
@pytest.mark.parametrize("auth", ["x-api-key", "bearer"])
def test_beta_query_and_both_auth_styles(stack: Stack, path: str, auth: str) -> None:
    headers = {"anthropic-version": "2023-06-01", "content-type": "application/json"}
    if auth == "x-api-key":
        headers["x-api-key"] = GATEWAY_KEY
    else:
        headers["authorization"] = f"Bearer {GATEWAY_KEY}"
    body = {"model": MODEL, "messages": USER}
    if "count_tokens" not in path:
        body["max_tokens"] = 16
    response = requests.post(stack.gateway_url + path, headers=headers, data=orjson.dumps(body), timeout=30)
    assert response.status_code == 200, response.text
    assert stack.requests[-1].path.split("?")[0] == path.split("?")[0]


def test_team_key_is_accepted(stack: Stack) -> None:
    stack.client(api_key=TEAM_KEY).messages.create(model=MODEL, max_tokens=16, messages=USER)
    exposition = stack.metrics.exposition().decode()
    assert 'team="platform-team"' in exposition


@pytest.mark.parametrize("key", ["wrong-key", None])
def test_inbound_401(stack: Stack, key: str | None) -> None:
    headers = {"anthropic-version": "2023-06-01", "content-type": "application/json"}
    if key:
        headers["x-api-key"] = key
    response = requests.post(
        stack.gateway_url + "/v1/messages",
        headers=headers,
        data=orjson.dumps({"model": MODEL, "max_tokens": 16, "messages": USER}),
        timeout=30,
    )
    assert response.status_code == 401
    assert response.headers["x-should-retry"] == "false"
    assert response.json()["type"] == "error"
    assert response.json()["error"]["type"] == "authentication_error"
    assert stack.requests == []


def test_inbound_401_through_sdk(stack: Stack) -> None:
    with pytest.raises(anthropic.AuthenticationError) as info:
        stack.client(api_key="nope", max_retries=3).messages.create(model=MODEL, max_tokens=16, messages=USER)
    assert info.value.status_code == 401
    assert stack.requests == []  # x-should-retry: false stopped the SDK's retries too


@pytest.mark.parametrize(
    ("scenario", "exception", "status", "error_type"),
    [
        ("error:529", anthropic.APIStatusError, 529, "overloaded_error"),
        ("error:429", anthropic.RateLimitError, 429, "rate_limit_error"),
        ("error:400", anthropic.BadRequestError, 400, "invalid_request_error"),
        ("error:500", anthropic.InternalServerError, 500, "api_error"),
    ],
)
def test_upstream_errors_pass_through(
    stack: Stack, scenario: str, exception: type[Exception], status: int, error_type: str
) -> None:
    client = stack.client(default_headers={"x-emulator-scenario": scenario})
    with pytest.raises(exception) as info:
        client.messages.create(model=MODEL, max_tokens=16, messages=USER)
    error = info.value
    assert isinstance(error, anthropic.APIStatusError)
    assert error.status_code == status
    assert error.body["error"]["type"] == error_type  # type: ignore[index]
    assert error.request_id and error.request_id.startswith("req_")


def test_upstream_error_body_is_verbatim(stack: Stack) -> None:
    """Same request to the emulator directly and through the gateway: same status, body, headers."""
    body = orjson.dumps({"model": "claude-nonexistent-9", "max_tokens": 16, "messages": USER})
    direct = requests.post(
        stack.emulator.base_url + "/v1/messages",  # type: ignore[attr-defined]
        headers={
            "x-api-key": UPSTREAM_KEY,
            "anthropic-version": "2023-06-01",
            "content-type": "application/json",
        },
        data=body,
        timeout=30,
    )
    through = requests.post(
        stack.gateway_url + "/v1/messages",
        headers={
            "x-api-key": GATEWAY_KEY,
            "anthropic-version": "2023-06-01",
            "content-type": "application/json",
        },
        data=body,
        timeout=30,
    )
    assert direct.status_code == through.status_code == 404

    def without_request_id(raw: bytes) -> dict[str, object]:
        parsed = orjson.loads(raw)
        parsed.pop("request_id", None)
        return parsed  # type: ignore[no-any-return]

    assert without_request_id(through.content) == without_request_id(direct.content)
    assert through.json()["request_id"] == through.headers["request-id"]


def test_stream_error_event_reaches_client(stack: Stack) -> None:
    client = stack.client(default_headers={"x-emulator-scenario": "stream_error"})
    with (
        pytest.raises(anthropic.APIStatusError) as info,
        client.messages.stream(model=MODEL, max_tokens=64, messages=USER) as stream,
    ):
        stream.get_final_message()
    assert info.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]


def test_body_too_large(make_stack: StackFactory) -> None:
    stack = make_stack(GATEWAY_MAX_BODY_BYTES="2048")
    with pytest.raises(anthropic.APIStatusError) as info:
        stack.client().messages.create(
            model=MODEL, max_tokens=16, messages=[{"role": "user", "content": "x" * 4096}]
        )
    assert info.value.status_code == 413
    assert info.value.body["error"]["type"] == "request_too_large"  # type: ignore[index]
    assert stack.requests == []


@pytest.mark.parametrize("body", [b"{not json", b"[1, 2]", b""])
def test_invalid_json(stack: Stack, body: bytes) -> None:
    response = requests.post(
        stack.gateway_url + "/v1/messages",
        headers={"x-api-key": GATEWAY_KEY, "content-type": "application/json"},
        data=body,
        timeout=30,
    )
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert stack.requests == []


def test_unknown_route_and_method(stack: Stack) -> None:
    missing = requests.get(stack.gateway_url + "/v1/nothing", timeout=30)
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "not_found_error"
    wrong = requests.get(stack.gateway_url + "/v1/messages", headers={"x-api-key": GATEWAY_KEY}, timeout=30)
    assert wrong.status_code == 405 and wrong.json()["type"] == "error"


def test_models_listing(stack: Stack) -> None:
    page = stack.client().models.list()
    ids = [model.id for model in page.data]
    assert MODEL in ids


def test_health_readiness_and_metrics(stack: Stack) -> None:
    assert requests.get(stack.gateway_url + "/healthz", timeout=30).status_code == 200
    ready = requests.get(stack.gateway_url + "/readyz", timeout=30)
    assert ready.status_code == 200 and ready.json()["provider"] == "anthropic"
    assert requests.get(stack.gateway_url + "/metrics", timeout=30).status_code == 401
    stack.client().messages.create(model=MODEL, max_tokens=16, messages=USER)
    with stack.client().messages.stream(model=MODEL, max_tokens=16, messages=USER) as stream:
        stream.get_final_message()
    for client_key in (GATEWAY_KEY, TEAM_KEY):  # every team's spend: not for a team's key
        assert (
            requests.get(
                stack.gateway_url + "/metrics", headers={"x-api-key": client_key}, timeout=30
            ).status_code
            == 403
        )
    metrics = requests.get(stack.gateway_url + "/metrics", headers={"x-api-key": METRICS_KEY}, timeout=30)
    assert metrics.status_code == 200
    text = metrics.text
    assert (
        'gateway_requests_total{model="claude-sonnet-4-6",provider="anthropic",status_class="2xx",stream="false"} 1.0'
        in text
    )
    assert (
        'gateway_requests_total{model="claude-sonnet-4-6",provider="anthropic",status_class="2xx",stream="true"} 1.0'
        in text
    )
    assert 'gateway_tokens_total{kind="output"' in text
    assert "gateway_request_duration_seconds_bucket" in text
    assert "gateway_time_to_first_token_seconds_count" in text
    for secret in (GATEWAY_KEY, UPSTREAM_KEY):
        assert secret not in text


def test_not_ready_without_upstream_credential(make_stack: StackFactory) -> None:
    stack = make_stack(ANTHROPIC_API_KEY="")
    ready = requests.get(stack.gateway_url + "/readyz", timeout=30)
    assert ready.status_code == 503 and "ANTHROPIC_API_KEY" in ready.json()["reason"]
    with pytest.raises(anthropic.APIStatusError) as info:
        stack.client().messages.create(model=MODEL, max_tokens=16, messages=USER)
    assert info.value.status_code == 503


def test_auth_token_sent_as_bearer(make_stack: StackFactory) -> None:
    stack = make_stack(ANTHROPIC_API_KEY="", ANTHROPIC_AUTH_TOKEN=UPSTREAM_KEY)
    stack.client().messages.create(model=MODEL, max_tokens=16, messages=USER)
    assert header(stack.requests[-1], "authorization") == f"Bearer {UPSTREAM_KEY}"
    assert header(stack.requests[-1], "x-api-key") is None
