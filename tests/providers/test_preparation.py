"""The one preparation step, without HTTP, on each of the four providers: model map, beta drops,
request-tag strip, upstream framing, byte identity of untouched bodies, copy-on-write, immutability,
the non-streaming and fallback-model variants, and the one shared ``GET /v1/models``."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import orjson
import pytest

from gateway.config import Settings
from gateway.errors import ClientInputError
from gateway.providers.base import (
    BufferedResponse,
    ClientRequest,
    Operation,
    PreparedRequest,
    Provider,
    UpstreamResponse,
)
from gateway.providers.factory import build_provider
from gateway.retry import ModelFallback, RetryPolicy, RetryResult, Stop, with_retry

FIRST_PARTY_MAP = '{"fast": "claude-haiku-4-5"}'
ENV: dict[str, dict[str, str]] = {
    "anthropic": {"ANTHROPIC_API_KEY": "sk-upstream-secret", "GATEWAY_MODEL_MAP": FIRST_PARTY_MAP},
    "foundry": {
        "GATEWAY_PROVIDER": "foundry",
        "ANTHROPIC_FOUNDRY_BASE_URL": "http://127.0.0.1:9/anthropic",
        "ANTHROPIC_FOUNDRY_API_KEY": "foundry-secret",
        "GATEWAY_MODEL_MAP": '{"fast": "haiku-deployment"}',
    },
    "bedrock": {
        "GATEWAY_PROVIDER": "bedrock",
        "AWS_REGION": "us-east-1",
        "AWS_BEARER_TOKEN_BEDROCK": "bedrock-secret",
        "GATEWAY_MODEL_MAP": '{"fast": "us.anthropic.claude-haiku-4-5-20251001-v1:0"}',
    },
    "vertex": {
        "GATEWAY_PROVIDER": "vertex",
        "CLOUD_ML_REGION": "us-east5",
        "ANTHROPIC_VERTEX_PROJECT_ID": "proj-1",
        "GATEWAY_MODEL_MAP": '{"fast": "claude-haiku-4-5@20251001"}',
    },
}
PROVIDERS = list(ENV)
CLOUDS = ["bedrock", "vertex"]
FIRST_PARTY_SURFACES = ["anthropic", "foundry"]
SECRETS = ("sk-upstream-secret", "foundry-secret", "bedrock-secret")
# where ``fast`` goes: (the upstream id, the path of a non-streaming Messages request)
MAPPED = {
    "anthropic": ("claude-haiku-4-5", "/v1/messages"),
    "foundry": ("haiku-deployment", "/v1/messages"),
    "bedrock": (
        "us.anthropic.claude-haiku-4-5-20251001-v1:0",
        "/model/us.anthropic.claude-haiku-4-5-20251001-v1:0/invoke",
    ),
    "vertex": (
        "claude-haiku-4-5@20251001",
        "/projects/proj-1/locations/us-east5/publishers/anthropic/models/claude-haiku-4-5@20251001:rawPredict",
    ),
}
USER = [{"role": "user", "content": "hi"}]
MODEL_ID = "claude-sonnet-4-6"


def provider_for(name: str, **env: str) -> Provider:
    return build_provider(Settings.from_environ({**ENV[name], **env}))


def client(
    payload: dict[str, Any] | None = None,
    *,
    raw: bytes | None = None,
    betas: str = "",
    operation: Operation = Operation.MESSAGES,
) -> ClientRequest:
    body = raw if raw is not None else orjson.dumps(payload)
    headers = [("anthropic-version", "2023-06-01"), ("content-type", "application/json")]
    if betas:
        headers.append(("anthropic-beta", betas))
    return ClientRequest(operation, body, orjson.loads(body), headers, "req-1")


def header(prepared: PreparedRequest, name: str) -> str | None:
    values = [value for key, value in prepared.headers if key.lower() == name]
    return ",".join(values) if values else None


def sent_body(name: str, prepared: PreparedRequest) -> dict[str, Any]:
    """The first-party view of what goes upstream (Bedrock's and Vertex's own keys left out)."""
    body: dict[str, Any] = orjson.loads(prepared.body)
    return {k: v for k, v in body.items() if k not in ("anthropic_version", "anthropic_beta")}


@pytest.mark.parametrize("name", PROVIDERS)
def test_model_map_applies_on_every_provider(name: str) -> None:
    """Issue 12: ``GATEWAY_MODEL_MAP={"fast": "claude-haiku-4-5"}`` on the first party sends
    ``claude-haiku-4-5`` (it reached the upstream as ``fast`` and got a 404)."""
    provider = provider_for(name)
    prepared = provider.prepare(client({"max_tokens": 8, "model": "fast", "messages": USER}))
    upstream_id, path = MAPPED[name]
    assert (prepared.upstream_model, prepared.path) == (upstream_id, path)
    assert prepared.model == "fast"  # the client's name, for fallbacks, logs and metrics
    body = sent_body(name, prepared)
    if name in FIRST_PARTY_SURFACES:  # the model is in the body, in its place
        assert list(body) == ["max_tokens", "model", "messages"] and body["model"] == upstream_id
    else:  # in the path
        assert body == {"max_tokens": 8, "messages": USER}
    counted = provider.prepare(client({"model": "fast", "messages": USER}, operation=Operation.COUNT_TOKENS))
    assert counted.upstream_model == upstream_id


def test_first_party_framing() -> None:
    provider = provider_for("anthropic")
    prepared = provider.prepare(client({"model": "fast", "messages": USER}, operation=Operation.COUNT_TOKENS))
    assert prepared.path == "/v1/messages/count_tokens"
    assert header(prepared, "x-client-request-id") == "req-1"
    assert orjson.loads(prepared.body) == {"model": "claude-haiku-4-5", "messages": USER}


@pytest.mark.parametrize("name", FIRST_PARTY_SURFACES)
def test_an_untouched_body_is_the_clients_bytes_and_nothing_is_copied(name: str) -> None:
    raw = b'{ "max_tokens" : 32,"model":"claude-sonnet-4-6",  "messages":[{"role":"user","content":"hi"}] }'
    request = client(raw=raw, betas="interleaved-thinking-2025-05-14")
    prepared = provider_for(name).prepare(request)
    assert prepared.body is request.body and not prepared.body_changed
    assert prepared.payload["messages"] is request.payload["messages"]
    assert header(prepared, "anthropic-beta") == "interleaved-thinking-2025-05-14"
    assert prepared.dropped_betas == ()


@pytest.mark.parametrize("name", PROVIDERS)
def test_the_prepared_request_cannot_change(name: str) -> None:
    prepared = provider_for(name).prepare(client({"model": "fast", "max_tokens": 8, "messages": USER}))
    with pytest.raises(dataclasses.FrozenInstanceError):
        prepared.body = b"{}"  # type: ignore[misc]
    with pytest.raises((AttributeError, TypeError)):  # derived, read-only
        prepared.upstream_model = "other"  # type: ignore[misc]
    with pytest.raises(AttributeError):  # a named tuple
        prepared.shaped.body_changed = True  # type: ignore[misc]
    with pytest.raises(TypeError):
        prepared.payload["model"] = "other"  # type: ignore[index]
    assert isinstance(prepared.headers, tuple) and isinstance(prepared.dropped_betas, tuple)
    with pytest.raises(dataclasses.FrozenInstanceError):
        prepared.client.headers = []  # type: ignore[misc]


@pytest.mark.parametrize("name", PROVIDERS)
def test_no_credential_is_part_of_the_prepared_request(name: str) -> None:
    """Credentials are added per attempt; the prepared request (and its repr) holds none."""
    prepared = provider_for(name).prepare(client({"model": "fast", "max_tokens": 8, "messages": USER}))
    names = {key.lower() for key, _ in prepared.headers}
    assert not names & {"x-api-key", "api-key", "authorization"}
    assert not any(secret in repr(prepared) for secret in SECRETS)


def claude_code_like() -> dict[str, Any]:
    """First-party-only fields on tools, system and messages, plus request tags."""
    return {
        "model": "claude-sonnet-4-6",
        "max_tokens": 64,
        "tools": [{"name": "t", "input_schema": {"type": "object"}, "cache_control": {"type": "ephemeral"}}],
        "system": [{"type": "text", "text": "S", "cache_control": {"type": "ephemeral", "scope": "global"}}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "a"}]},
            {"role": "assistant", "content": "b"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "c", "cache_control": {"type": "ephemeral", "scope": "global"}}
                ],
            },
        ],
        "context_management": {"edits": [{"type": "clear_thinking_20251015"}]},
        "tags": {"team": "search"},
    }


CC_BETAS = (
    "claude-code-20250219,context-management-2025-06-27,prompt-caching-scope-2026-01-05,"
    "request-tags-2026-08-21,interleaved-thinking-2025-05-14,made-up-2099-01-01"
)


@pytest.mark.parametrize("name", CLOUDS)
def test_clouds_drop_first_party_betas_with_their_body_halves_copy_on_write(name: str) -> None:
    request = client(claude_code_like(), betas=CC_BETAS)
    before = copy.deepcopy(request.payload)
    prepared = provider_for(name).prepare(request)
    assert prepared.dropped_betas == (
        "context-management-2025-06-27",
        "prompt-caching-scope-2026-01-05",
        "request-tags-2026-08-21",
        "made-up-2099-01-01",
    )
    body = orjson.loads(prepared.body)
    assert "tags" not in body and "context_management" not in body  # request tags stripped
    assert body["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert body["messages"][2]["content"][0]["cache_control"] == {"type": "ephemeral"}
    if name == "bedrock":
        assert header(prepared, "anthropic-beta") == "claude-code-20250219"
        assert body["anthropic_beta"] == ["interleaved-thinking-2025-05-14"]
    else:
        assert header(prepared, "anthropic-beta") == "claude-code-20250219,interleaved-thinking-2025-05-14"
    # the client's payload is untouched; what did not change is shared, not copied
    assert request.payload == before
    assert prepared.payload["tools"] is request.payload["tools"]
    assert prepared.payload["messages"][0] is request.payload["messages"][0]
    assert prepared.payload["messages"][2] is not request.payload["messages"][2]


def test_first_party_beta_policy_row_drops_betas_and_strips_request_tags() -> None:
    provider = provider_for("anthropic", GATEWAY_BETA_POLICY='{"anthropic": ["context-1m-2025-08-07"]}')
    tagged = {"model": "claude-sonnet-4-6", "max_tokens": 8, "messages": USER, "tags": {"team": "x"}}
    request = client(tagged, betas="context-1m-2025-08-07,request-tags-2026-08-21")
    prepared = provider.prepare(request)
    assert prepared.dropped_betas == ("request-tags-2026-08-21",)
    assert header(prepared, "anthropic-beta") == "context-1m-2025-08-07"
    assert orjson.loads(prepared.body) == {k: v for k, v in tagged.items() if k != "tags"}
    assert request.payload == tagged
    # the default first-party policy keeps every beta and the tags, bytes untouched
    default = provider_for("anthropic").prepare(request)
    assert default.body is request.body and default.dropped_betas == ()


@pytest.mark.parametrize("name", PROVIDERS)
def test_the_non_streaming_variant_keeps_every_decision(name: str) -> None:
    provider = provider_for(name)
    prepare_calls: list[ClientRequest] = []
    original = provider.preparer.prepare

    def counting(request: ClientRequest) -> PreparedRequest:
        prepare_calls.append(request)
        return original(request)

    provider.preparer.prepare = counting  # type: ignore[method-assign]
    payload = {"model": "fast", "max_tokens": 8, "stream": True, "messages": USER, "tags": {"t": "1"}}
    prepared = provider.prepare(client(payload, betas="request-tags-2026-08-21,claude-code-20250219"))
    variant = prepared.as_non_streaming()
    assert len(prepare_calls) == 1  # derived, not prepared again
    assert prepared.stream and not variant.stream and "stream" not in variant.payload
    assert (variant.upstream_model, variant.betas, variant.dropped_betas) == (
        prepared.upstream_model,
        prepared.betas,
        prepared.dropped_betas,
    )
    assert variant.path == MAPPED[name][1]  # invoke / rawPredict, not their streaming verbs
    assert "stream" not in orjson.loads(variant.body)
    if name in CLOUDS:
        assert prepared.path != variant.path
    else:
        assert orjson.loads(variant.body) == {
            k: v for k, v in orjson.loads(prepared.body).items() if k != "stream"
        }
    assert variant.as_non_streaming() is variant


@pytest.mark.parametrize("name", PROVIDERS)
def test_a_fallback_model_is_prepared_once_for_that_model(name: str) -> None:
    provider = provider_for(name)
    thinking = {"type": "thinking", "thinking": "hm", "signature": "sig"}
    history = [*USER, {"role": "assistant", "content": [thinking, {"type": "text", "text": "x"}]}, *USER]
    prepared = provider.prepare(client({"model": "claude-sonnet-4-6", "max_tokens": 8, "messages": history}))
    fallback = prepared.with_model("fast")
    assert fallback.model == "fast" and fallback.upstream_model == MAPPED[name][0]
    assert b"signature" not in fallback.body and b"signature" in prepared.body
    assert fallback.client.request_id == prepared.client.request_id


@pytest.mark.parametrize("name", CLOUDS)
def test_clouds_refuse_unservable_requests_before_sending(name: str) -> None:
    provider = provider_for(name)
    with pytest.raises(ClientInputError) as unknown:
        provider.prepare(client({"model": "gpt-4o", "max_tokens": 8, "messages": USER}))
    assert (unknown.value.status, unknown.value.error_type) == (404, "not_found_error")
    with pytest.raises(ClientInputError) as missing:
        provider.prepare(client({"max_tokens": 8, "messages": USER}))
    assert missing.value.status == 400


def test_bedrock_count_tokens_for_a_profile_arn_is_answered_locally() -> None:
    arn = "arn:aws:bedrock:us-east-1:123456789012:application-inference-profile/abc"
    prepared = provider_for("bedrock").prepare(
        client({"model": arn, "messages": USER}, operation=Operation.COUNT_TOKENS)
    )
    assert (
        prepared.unsupported is not None and "CountTokens takes foundation-model ids" in prepared.unsupported
    )
    counted = provider_for("bedrock").prepare(
        client({"model": "claude-sonnet-4-6", "messages": USER}, operation=Operation.COUNT_TOKENS)
    )
    assert counted.unsupported is None and counted.path == "/model/anthropic.claude-sonnet-4-6/count-tokens"


@pytest.mark.parametrize("name", ["foundry", "bedrock", "vertex"])
async def test_one_models_listing_for_the_clouds(name: str) -> None:
    provider = provider_for(name)
    assert type(provider).list_models is Provider.list_models  # no copy of its own
    listing = orjson.loads(await (await provider.list_models([], "")).read())
    ids = [model["id"] for model in listing["data"]]
    assert "claude-sonnet-4-6" in ids and "fast" in ids  # the table, then the model map
    assert listing["first_id"] == ids[0] and listing["has_more"] is False
    assert provider.model_listing.page() is provider.model_listing.page()  # serialised once


async def test_an_unservable_fallback_model_ends_the_retry_loop_with_its_404() -> None:
    """The fallback model is prepared when the loop switches to it; a model the upstream does not
    serve is the 404 it would be for a client, and nothing more is sent."""
    prepared = provider_for("bedrock").prepare(client({"model": MODEL_ID, "max_tokens": 8, "messages": USER}))
    sent: list[PreparedRequest] = []

    async def overloaded(request: PreparedRequest) -> UpstreamResponse:
        sent.append(request)
        return BufferedResponse(529, b"{}", [])

    async def no_wait(seconds: float) -> None:
        return None

    policy = RetryPolicy(fallback_model="gpt-4o", fallback_after_overloads=1)
    events = [
        event async for event in with_retry(overloaded, prepared, policy, sleep=no_wait, rng=lambda: 0.0)
    ]
    assert isinstance(events[-2], ModelFallback) and events[-2].to_model == "gpt-4o"
    final = events[-1]
    assert isinstance(final, RetryResult) and final.error is not None
    assert (final.error.status, final.stop) == (404, Stop.DONE) and final.request is prepared
    assert len(sent) == 1 and sent[0] is prepared


def test_a_changed_client_request_serialises_its_body_once_and_only_when_read() -> None:
    request = client({"model": MODEL_ID, "max_tokens": 8, "messages": USER})
    changed = request.with_payload({**request.payload, "max_tokens": 16}).with_headers([("x-a", "1")])
    assert changed._body is None  # not serialised by the change itself
    body = changed.body
    assert orjson.loads(body)["max_tokens"] == 16 and changed.body is body
    assert request.with_headers([]).body is request.body  # the client's own bytes stay
