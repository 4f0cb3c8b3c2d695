"""The model catalogue's rules, table-driven: naming patterns, precedence, discovery checks, 404s."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from gateway.config import ProviderName, Settings
from gateway.providers import model_patterns
from gateway.providers.bedrock_discovery import control_url, inference_profile_ids, on_demand_model_ids
from gateway.providers.bedrock_errors import http_error
from gateway.providers.model_discovery import DiscoveryError, ModelCatalogue
from gateway.providers.model_listing import describe_model_map, served_models
from gateway.providers.models import ModelResolver, UnknownModel, unservable_message
from gateway.providers.preparation import resolver_for
from gateway.providers.vertex_discovery import publisher_model_ids, publisher_models_url
from gateway.providers.vertex_errors import vertex_error_response
from tests.providers.model_catalogue_support import StepSleep

BEDROCK = ProviderName.BEDROCK
VERTEX = ProviderName.VERTEX


def bedrock(prefix: str | None = "us", overrides: dict[str, str] | None = None) -> ModelResolver:
    return ModelResolver(BEDROCK, overrides or {}, prefix)


def vertex(overrides: dict[str, str] | None = None) -> ModelResolver:
    return ModelResolver(VERTEX, overrides or {})


@pytest.mark.parametrize(
    ("client", "bedrock_id", "vertex_id"),
    [
        # undated, by pattern (what Claude Code 2.1.332 sends by default and for its aliases)
        ("claude-opus-5-5", "us.anthropic.claude-opus-5-5", "claude-opus-5-5"),
        ("claude-sonnet-5-5", "us.anthropic.claude-sonnet-5-5", "claude-sonnet-5-5"),
        ("claude-haiku-5-5", "us.anthropic.claude-haiku-5-5", "claude-haiku-5-5"),
        ("claude-mythos-6", "us.anthropic.claude-mythos-6", "claude-mythos-6"),
        ("claude-opus-5-5[1m]", "us.anthropic.claude-opus-5-5", "claude-opus-5-5"),
        # dated, by pattern: -v1:0 on Bedrock, @date on Vertex
        ("claude-haiku-4-6-20260301", "us.anthropic.claude-haiku-4-6-20260301-v1:0", "claude-haiku-4-6@20260301"),
        ("claude-opus-5-20260601", "us.anthropic.claude-opus-5-20260601-v1:0", "claude-opus-5@20260601"),
        ("claude-3-5-sonnet-20241022", "us.anthropic.claude-3-5-sonnet-20241022-v1:0", "claude-3-5-sonnet@20241022"),
        # the table keeps precedence where the clouds' ids do not follow the pattern
        ("claude-opus-4-6", "us.anthropic.claude-opus-4-6-v1", "claude-opus-4-6"),
        ("claude-sonnet-4-5", "us.anthropic.claude-sonnet-4-5-20250929-v1:0", "claude-sonnet-4-5@20250929"),
        ("claude-opus-4-0", "us.anthropic.claude-opus-4-20250514-v1:0", "claude-opus-4@20250514"),
        ("claude-3-7-sonnet-latest", "us.anthropic.claude-3-7-sonnet-20250219-v1:0", "claude-3-7-sonnet@20250219"),
        # provider-native ids pass through
        ("us.anthropic.claude-sonnet-4-5-20250929-v1:0", "us.anthropic.claude-sonnet-4-5-20250929-v1:0", None),
        ("claude-sonnet-4-5@20250929", None, "claude-sonnet-4-5@20250929"),
    ],
)  # fmt: skip
def test_mapping_table(client: str, bedrock_id: str | None, vertex_id: str | None) -> None:
    if bedrock_id is not None:
        assert bedrock().resolve(client) == bedrock_id
    if vertex_id is not None:
        assert vertex().resolve(client) == vertex_id


@pytest.mark.parametrize(
    "junk",
    [
        "gpt-4o",
        "Claude-Opus-5-5",
        "claude-opus",
        "claude-opus-latest",
        "claude-opus-5-5-beta",
        "claude opus 5",
        "claude-opus-123",
        "claude-opus-5-5-2026",
        "",
    ],
)
@pytest.mark.parametrize("resolver", [bedrock(), vertex()], ids=["bedrock", "vertex"])
def test_non_anthropic_style_ids_have_no_pattern(resolver: ModelResolver, junk: str) -> None:
    with pytest.raises(UnknownModel) as info:
        resolver.resolve(junk)
    assert info.value.message == unservable_message(junk, resolver.provider)


def test_unservable_message_names_the_model_and_the_variable() -> None:
    assert str(UnknownModel("claude-sonnet-5-5", BEDROCK)) == (
        "model: claude-sonnet-5-5 is not served by the bedrock upstream (map it with GATEWAY_MODEL_MAP)"
    )


def test_model_map_overrides_table_pattern_and_junk() -> None:
    overrides = {
        "claude-sonnet-5-5": "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
        "claude-opus-4-6": "eu.anthropic.claude-opus-4-6-v1",
        "house-model": "arn:aws:bedrock:us-east-1:123456789012:application-inference-profile/abc",
    }
    resolver = bedrock(overrides=overrides)
    for name, target in overrides.items():
        assert resolver.resolve(name) == target


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"AWS_REGION": "us-east-1"}, "us.anthropic.claude-opus-5-5"),
        ({"AWS_REGION": "eu-west-1"}, "eu.anthropic.claude-opus-5-5"),
        ({"AWS_REGION": "ap-northeast-1"}, "jp.anthropic.claude-opus-5-5"),
        ({"AWS_REGION": "eu-west-1", "GATEWAY_BEDROCK_PROFILE_PREFIX": "global"}, "global.anthropic.claude-opus-5-5"),
        ({"AWS_REGION": "us-east-1", "GATEWAY_BEDROCK_PROFILE_PREFIX": "none"}, "anthropic.claude-opus-5-5"),
    ],
)  # fmt: skip
def test_geography_comes_from_region_or_prefix(env: dict[str, str], expected: str) -> None:
    settings = Settings.from_environ({"GATEWAY_PROVIDER": "bedrock", **env})
    assert resolver_for(settings).resolve("claude-opus-5-5") == expected


@pytest.mark.parametrize("provider", [ProviderName.ANTHROPIC, ProviderName.FOUNDRY])
def test_first_party_and_foundry_pass_names_through(provider: ProviderName) -> None:
    resolver = ModelResolver(provider, {})
    assert resolver.resolve("claude-opus-5-5") == "claude-opus-5-5"
    assert resolver.resolve("my-deployment") == "my-deployment"


@pytest.mark.parametrize(
    ("native", "client"),
    [
        ("us.anthropic.claude-opus-5-5", "claude-opus-5-5"),
        ("anthropic.claude-sonnet-4-5-20250929-v1:0", "claude-sonnet-4-5-20250929"),
        ("global.anthropic.claude-opus-4-6-v1", "claude-opus-4-6"),
        ("us.meta.llama3-70b-instruct-v1:0", None),
        ("emu0profile01", None),
    ],
)
def test_bedrock_ids_back_to_client_ids(native: str, client: str | None) -> None:
    assert model_patterns.client_id_from_bedrock(native) == client


@pytest.mark.parametrize(
    ("native", "client"),
    [
        ("claude-opus-5-5", "claude-opus-5-5"),
        ("claude-haiku-4-5@20251001", "claude-haiku-4-5-20251001"),
        ("claude-3-7-sonnet@20250219", "claude-3-7-sonnet-20250219"),
        ("gemini-2.5-pro", None),
    ],
)
def test_vertex_ids_back_to_client_ids(native: str, client: str | None) -> None:
    assert model_patterns.client_id_from_vertex(native) == client


@pytest.mark.parametrize(
    ("model", "name"),
    [
        ("claude-opus-5-5", "Claude Opus 5.5"),
        ("claude-mythos-6", "Claude Mythos 6"),
        ("claude-haiku-4-6-20260301", "Claude Haiku 4.6"),
        ("claude-3-5-sonnet-20241022", "Claude Sonnet 3.5"),
        ("house-model", "house-model"),
    ],
)
def test_display_names(model: str, name: str) -> None:
    assert model_patterns.display_name(model) == name


async def catalogue_of(*ids: str) -> ModelCatalogue:
    async def fetch() -> frozenset[str]:
        return frozenset(ids)

    catalogue = ModelCatalogue(fetch, interval_s=0, timeout_s=1)
    assert await catalogue.refresh()
    return catalogue


async def test_bedrock_with_a_catalogue_serves_only_what_is_listed() -> None:
    catalogue = await catalogue_of(
        "us.anthropic.claude-opus-5-5", "anthropic.claude-sonnet-4-5-20250929-v1:0"
    )
    resolver = ModelResolver(BEDROCK, {"claude-sonnet-5-5": "us.anthropic.anything"}, "us", catalogue)
    assert resolver.resolve("claude-opus-5-5") == "us.anthropic.claude-opus-5-5"
    # no us. profile listed, but the base model is served on demand: same model, in-region
    assert resolver.resolve("claude-sonnet-4-5") == "anthropic.claude-sonnet-4-5-20250929-v1:0"
    assert resolver.resolve("claude-sonnet-5-5") == "us.anthropic.anything"  # the map is not checked
    arn = "arn:aws:bedrock:us-east-1:123456789012:application-inference-profile/abc"
    assert resolver.resolve(arn) == arn
    for unlisted in ("claude-haiku-5-5", "claude-opus-4-6", "eu.anthropic.claude-opus-5-5"):
        with pytest.raises(UnknownModel):
            resolver.resolve(unlisted)


async def test_a_catalogue_may_confirm_the_pattern_over_the_table() -> None:
    catalogue = await catalogue_of("us.anthropic.claude-opus-4-6")  # not the table's "-v1" id
    resolver = ModelResolver(BEDROCK, {}, "us", catalogue)
    assert resolver.candidates("claude-opus-4-6") == [
        "us.anthropic.claude-opus-4-6-v1",
        "anthropic.claude-opus-4-6-v1",
        "us.anthropic.claude-opus-4-6",
        "anthropic.claude-opus-4-6",
    ]
    assert resolver.resolve("claude-opus-4-6") == "us.anthropic.claude-opus-4-6"
    assert bedrock().resolve("claude-opus-4-6") == "us.anthropic.claude-opus-4-6-v1"  # no catalogue


async def test_vertex_with_a_catalogue_checks_model_names() -> None:
    resolver = ModelResolver(VERTEX, {}, None, await catalogue_of("claude-opus-5-5", "claude-haiku-4-5"))
    assert resolver.resolve("claude-opus-5-5") == "claude-opus-5-5"
    assert resolver.resolve("claude-haiku-4-5-20251001") == "claude-haiku-4-5@20251001"
    with pytest.raises(UnknownModel):
        resolver.resolve("claude-sonnet-5-5")


async def test_listing_follows_the_catalogue() -> None:
    catalogue = await catalogue_of(
        "us.anthropic.claude-mythos-6",
        "us.anthropic.claude-opus-5-5",
        "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
        "us.meta.llama3-70b-instruct-v1:0",
    )
    resolver = ModelResolver(
        BEDROCK, {"fast": "us.anthropic.claude-haiku-4-5-20251001-v1:0"}, "us", catalogue
    )
    listed = served_models(resolver)
    assert [m["id"] for m in listed] == ["claude-mythos-6", "claude-opus-5-5", "claude-sonnet-4-5", "fast"]
    assert listed[0] == {
        "type": "model",
        "id": "claude-mythos-6",
        "display_name": "Claude Mythos 6",
        "created_at": "1970-01-01T00:00:00Z",
    }


def test_listing_without_discovery_is_table_and_map() -> None:
    bedrock_ids = [m["id"] for m in served_models(bedrock(overrides={"claude-sonnet-5-5": "x"}))]
    assert bedrock_ids[0] == "claude-opus-5-5" and "claude-sonnet-4-5" in bedrock_ids
    assert bedrock_ids[-1] == "claude-sonnet-5-5" and "claude-haiku-5-5" not in bedrock_ids
    vertex_ids = [m["id"] for m in served_models(vertex())]
    assert vertex_ids[:2] == ["claude-opus-5-5", "claude-sonnet-5-5"] and "claude-haiku-5-5" not in vertex_ids
    assert describe_model_map({"a": "b"}) == "a -> b" and describe_model_map({}) == "none"


def _bedrock_error(code: str, status: int, message: str) -> tuple[int, dict[str, Any]]:
    response = http_error(
        status,
        [("x-amzn-ErrorType", f"{code}:http://internal.amazon.com/coral/com.amazon.bedrock/")],
        orjson.dumps({"message": message}),
        request_id="gw-1",
        client_model="claude-sonnet-5-5",
    )
    return response.status, orjson.loads(response.body)["error"]


def test_bedrock_unknown_model_answers_become_the_helpful_404() -> None:
    expected = unservable_message("claude-sonnet-5-5", BEDROCK)
    for code, status, message in (
        ("ResourceNotFoundException", 404, "Model arn:aws:bedrock:us-east-1:123456789012:x not found"),
        ("ValidationException", 400, "The provided model identifier is invalid."),
    ):
        assert _bedrock_error(code, status, message) == (
            404,
            {"type": "not_found_error", "message": expected},
        )
    status, error = _bedrock_error("ValidationException", 400, "messages: field required")
    assert status == 400 and error["type"] == "invalid_request_error"


def test_vertex_not_found_becomes_the_helpful_404() -> None:
    body = orjson.dumps(
        [
            {
                "error": {
                    "code": 404,
                    "message": "Publisher Model `projects/p-123/...` not found.",
                    "status": "NOT_FOUND",
                }
            }
        ]
    )
    named = vertex_error_response(404, body, [], "gw-1", "claude-haiku-5-5")
    assert orjson.loads(named.body)["error"] == {
        "type": "not_found_error",
        "message": unservable_message("claude-haiku-5-5", VERTEX),
    }
    anonymous = orjson.loads(vertex_error_response(404, body, [], "gw-1").body)["error"]
    assert "p-123" not in anonymous["message"] and "GATEWAY_MODEL_MAP" not in anonymous["message"]


def test_control_plane_answers_are_parsed() -> None:
    profiles = [
        {"inferenceProfileId": "us.anthropic.claude-opus-5-5", "status": "ACTIVE"},
        {"inferenceProfileId": "us.meta.llama3-70b-instruct-v1:0", "status": "ACTIVE"},
        {"inferenceProfileId": "abc123", "status": "ACTIVE", "type": "APPLICATION"},
    ]
    assert inference_profile_ids(profiles) == {"us.anthropic.claude-opus-5-5"}
    models = [
        {"modelId": "anthropic.claude-opus-5-5", "inferenceTypesSupported": ["INFERENCE_PROFILE"]},
        {"modelId": "anthropic.claude-3-haiku-20240307-v1:0", "inferenceTypesSupported": ["ON_DEMAND"]},
        {"modelId": "amazon.nova-pro-v1:0", "inferenceTypesSupported": ["ON_DEMAND"]},
    ]
    assert on_demand_model_ids(models) == {"anthropic.claude-3-haiku-20240307-v1:0"}
    page = {
        "publisherModels": [
            {"name": "publishers/anthropic/models/claude-opus-5-5", "versionId": "001"},
            {"name": "publishers/anthropic/models/claude-sonnet-4-5", "versionId": "20250929"},
            {"name": "publishers/anthropic/models/claude-haiku-4-5@20251001"},
            {"name": "publishers/google/models/gemini-2.5-pro"},
            {"versionId": "001"},
            "junk",
        ]
    }
    assert publisher_model_ids(page) == {
        "claude-opus-5-5",
        "claude-sonnet-4-5",
        "claude-sonnet-4-5@20250929",
        "claude-haiku-4-5@20251001",
    }


def test_control_plane_urls() -> None:
    base = {"GATEWAY_PROVIDER": "bedrock", "AWS_REGION": "eu-west-1"}
    assert control_url(Settings.from_environ(base)) == "https://bedrock.eu-west-1.amazonaws.com"
    override = Settings.from_environ({**base, "GATEWAY_BEDROCK_CONTROL_URL": "http://127.0.0.1:9/"})
    assert control_url(override) == "http://127.0.0.1:9"
    assert publisher_models_url("https://us-east5-aiplatform.googleapis.com/v1") == (
        "https://us-east5-aiplatform.googleapis.com/v1beta1/publishers/anthropic/models"
    )
    assert (
        publisher_models_url("http://127.0.0.1:8000")
        == "http://127.0.0.1:8000/v1beta1/publishers/anthropic/models"
    )


async def test_refresh_loop_keeps_the_last_good_catalogue() -> None:
    answers: list[frozenset[str] | Exception] = [
        DiscoveryError("ListInferenceProfiles: HTTP 503"),
        frozenset({"us.anthropic.claude-opus-5-5"}),
        frozenset(),
        DiscoveryError("ListInferenceProfiles: HTTP 403 AccessDeniedException"),
        frozenset({"us.anthropic.claude-opus-5-5", "us.anthropic.claude-sonnet-5-5"}),
    ]

    async def fetch() -> frozenset[str]:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    sleep = StepSleep()
    clock = iter(range(100, 200)).__next__
    catalogue = ModelCatalogue(fetch, interval_s=600, timeout_s=1, clock=lambda: float(clock()), sleep=sleep)
    await catalogue.start()  # the first read fails: no catalogue, patterns apply
    assert catalogue.current is None and catalogue.failures == 1
    assert "HTTP 503" in catalogue.describe() and "patterns apply" in catalogue.describe()
    seen = []
    for _ in range(4):
        await sleep.step()
        seen.append(None if catalogue.current is None else sorted(catalogue.current.ids))
    await catalogue.close()
    opus = ["us.anthropic.claude-opus-5-5"]
    assert seen == [opus, opus, opus, [*opus, "us.anthropic.claude-sonnet-5-5"]]
    assert (catalogue.reads, catalogue.failures) == (2, 3)
    assert sleep.calls == [600, 600, 600, 600, 600]
    assert catalogue.describe() == "on, 2 models from the control plane"


async def test_a_read_is_bounded_by_the_timeout() -> None:
    async def hang() -> frozenset[str]:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    catalogue = ModelCatalogue(hang, interval_s=0, timeout_s=0.05)
    started = asyncio.get_running_loop().time()
    await catalogue.start()
    assert asyncio.get_running_loop().time() - started < 2
    assert catalogue.current is None and catalogue.last_error == "no answer within 0.05s"
