"""The model catalogue end to end: the real SDK through the gateway to the Bedrock and Vertex
emulators, by naming pattern and with control-plane discovery through real botocore and
google-auth (SigV4, a Bedrock API key over TLS, a service-account token)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anthropic
import pytest

from emulators import EmulatorConfig, ManualClock, RunningEmulator, run_emulator
from emulators.bedrock_config import (
    DEFAULT_ACCESS_KEY_ID,
    DEFAULT_API_KEY,
    DEFAULT_SECRET_ACCESS_KEY,
    BedrockOptions,
)
from gateway.app import create_app
from gateway.config import Settings
from gateway.metrics import GatewayMetrics
from gateway.process import running
from gateway.providers import bedrock_discovery, vertex_discovery
from gateway.providers.bedrock_auth import SigV4ChainAuth
from gateway.providers.bedrock_discovery import bedrock_fetcher
from gateway.providers.model_discovery import ModelCatalogue
from gateway.providers.models import FIRST_PARTY_MODELS
from gateway.providers.vertex import VertexProvider
from tests.providers.bedrock_harness import (
    GATEWAY_KEY,
    apply_aws_env,
    bedrock_gateway,
    bedrock_upstream,
    isolated_aws_files,
    serve_bedrock_emulator,
)
from tests.providers.model_catalogue_support import StepSleep
from tests.providers.vertex_harness import GATEWAY_KEY as VERTEX_GATEWAY_KEY
from tests.providers.vertex_harness import gateway_settings, token_requests, vertex_upstream
from tests.support.proxy import forward_proxy
from tests.support.tls import make_pki

SONNET_4_5 = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
DISCOVERY = {"GATEWAY_MODEL_DISCOVERY": "1", "GATEWAY_MODEL_DISCOVERY_INTERVAL_S": "0"}
USER: Any = [{"role": "user", "content": "which model?"}]
CONTROL_PATHS = ("/inference-profiles", "/foundation-models")


def helpful(model: str, provider: str) -> dict[str, str]:
    return {
        "type": "not_found_error",
        "message": f"model: {model} is not served by the {provider} upstream (map it with GATEWAY_MODEL_MAP)",
    }


def error_of(exc: anthropic.APIStatusError) -> Any:
    assert isinstance(exc.body, dict)
    return exc.body["error"]


def invokes(emulator: RunningEmulator) -> list[str]:
    return [r.path for r in emulator.requests if r.path.startswith("/model/")]


def control_requests(emulator: RunningEmulator) -> list[Any]:
    return [r for r in emulator.requests if r.path_only in CONTROL_PATHS]


class Stack:
    def __init__(self, url: str, emulator: RunningEmulator, provider: Any, key: str = GATEWAY_KEY) -> None:
        self.emulator = emulator
        self.provider = provider
        self.client = anthropic.AsyncAnthropic(api_key=key, base_url=url, max_retries=0)

    async def ask(self, model: str) -> anthropic.types.Message:
        return await self.client.messages.create(model=model, max_tokens=16, messages=USER)

    async def listed(self) -> list[str]:
        return [model.id async for model in self.client.models.list()]


@contextlib.asynccontextmanager
async def bedrock_stack(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, discovery: bool, **overrides: str
) -> AsyncIterator[Stack]:
    async with bedrock_upstream(tmp_path, config=EmulatorConfig(clock=ManualClock())) as (env, emulator):
        apply_aws_env(monkeypatch, env)
        if discovery:
            overrides = {**DISCOVERY, "GATEWAY_BEDROCK_CONTROL_URL": emulator.base_url, **overrides}
        async with bedrock_gateway(env, **overrides) as (server, provider):
            stack = Stack(server.base_url, emulator, provider)
            async with stack.client:
                yield stack


async def test_bedrock_patterns_serve_the_newest_claude_code_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with bedrock_stack(tmp_path, monkeypatch, discovery=False) as s:
        message = await s.ask("claude-opus-5-5")
        assert message.model == "claude-opus-5-5" and message.content
        async with s.client.messages.stream(model="claude-opus-5-5", max_tokens=16, messages=USER) as stream:
            assert (await stream.get_final_message()).stop_reason == "end_turn"
        with pytest.raises(anthropic.NotFoundError) as info:
            await s.ask("claude-sonnet-5-5")
        assert error_of(info.value) == helpful("claude-sonnet-5-5", "bedrock")
        assert invokes(s.emulator) == [
            "/model/us.anthropic.claude-opus-5-5/invoke",
            "/model/us.anthropic.claude-opus-5-5/invoke-with-response-stream",
            "/model/us.anthropic.claude-sonnet-5-5/invoke",  # by pattern; Bedrock answers 404
        ]
        listed = await s.listed()
        assert listed[0] == "claude-opus-5-5" and "claude-sonnet-4-5" in listed
        assert "claude-sonnet-5-5" not in listed and "claude-haiku-5-5" not in listed
        assert not control_requests(s.emulator) and s.provider.describe()["model_discovery"] == "off"


async def test_bedrock_discovery_refuses_unlisted_models_before_they_leave(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with bedrock_stack(tmp_path, monkeypatch, discovery=True) as s:
        profiles, models = control_requests(s.emulator)  # read once, at start-up
        assert profiles.path == "/inference-profiles?maxResults=1000"
        assert models.path == "/foundation-models?byProvider=Anthropic"
        for request in (profiles, models):
            assert request.header("authorization").startswith(
                f"AWS4-HMAC-SHA256 Credential={DEFAULT_ACCESS_KEY_ID}/"
            )
            assert "/us-east-1/bedrock/aws4_request" in request.header("authorization")
        served = s.provider.catalogue.current.ids
        assert {"us.anthropic.claude-opus-5-5", "global.anthropic.claude-opus-5-5", SONNET_4_5} <= served
        assert not any("sonnet-5-5" in i or "haiku-5-5" in i for i in served)
        assert (
            s.provider.describe()["model_discovery"]
            == f"on, {len(served)} models from the Bedrock control plane"
        )

        assert (await s.ask("claude-opus-5-5")).model == "claude-opus-5-5"
        for model in ("claude-sonnet-5-5", "claude-haiku-5-5", "us.anthropic.claude-sonnet-5-5"):
            with pytest.raises(anthropic.NotFoundError) as info:
                await s.ask(model)
            assert error_of(info.value) == helpful(model, "bedrock")
        assert invokes(s.emulator) == ["/model/us.anthropic.claude-opus-5-5/invoke"]

        listed = await s.listed()
        table = [entry.alias for entry in FIRST_PARTY_MODELS if entry.bedrock is not None]
        assert listed == ["claude-3-haiku-20240307", *table]  # the emulator also serves Haiku 3


@pytest.mark.parametrize("discovery", [True, False], ids=["discovery", "patterns"])
async def test_bedrock_model_map_substitutes_only_when_configured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, discovery: bool
) -> None:
    mapping = '{"claude-sonnet-5-5": "' + SONNET_4_5 + '"}'
    async with bedrock_stack(tmp_path, monkeypatch, discovery=discovery, GATEWAY_MODEL_MAP=mapping) as s:
        message = await s.ask("claude-sonnet-5-5")
        assert message.model == "claude-sonnet-4-5-20250929"  # the answer names the model that replied
        assert invokes(s.emulator) == [f"/model/{SONNET_4_5}/invoke"]
        assert "claude-sonnet-5-5" in await s.listed()
        assert s.provider.describe()["model_map"] == f"claude-sonnet-5-5 -> {SONNET_4_5}"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.asynccontextmanager
async def silent_server() -> AsyncIterator[str]:
    """A TCP server that accepts and never answers: a control plane that hangs."""
    held: list[asyncio.StreamWriter] = []

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        for writer in held:
            writer.close()
        server.close()


@pytest.mark.parametrize("failure", ["refused", "silent", "wrong-credentials"])
async def test_bedrock_discovery_failure_does_not_stop_start_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, failure: str
) -> None:
    caplog.set_level(logging.INFO)
    strict = BedrockOptions(credentials={"AKIDOTHERACCOUNT": "other-secret"})
    async with contextlib.AsyncExitStack() as stack:
        if failure == "refused":
            control = f"http://127.0.0.1:{free_port()}"
        elif failure == "silent":
            control = await stack.enter_async_context(silent_server())
        else:
            control = (await stack.enter_async_context(serve_bedrock_emulator(options=strict))).base_url
        timeout = 1 if failure == "silent" else 10  # the others fail at once
        started = asyncio.get_running_loop().time()
        s = await stack.enter_async_context(
            bedrock_stack(
                tmp_path,
                monkeypatch,
                discovery=True,
                GATEWAY_BEDROCK_CONTROL_URL=control,
                GATEWAY_MODEL_DISCOVERY_TIMEOUT_S=str(timeout),
            )
        )
        assert asyncio.get_running_loop().time() - started < timeout + 3  # bounded
        catalogue = s.provider.catalogue
        assert catalogue.current is None and catalogue.failures == 1
        expected = {
            "refused": ("EndpointConnectionError",),
            # botocore's read timeout (half the bound) or, on a slow machine, the bound itself
            "silent": ("ReadTimeoutError", f"no answer within {timeout:g}s"),
            "wrong-credentials": ("ListInferenceProfiles: HTTP 403 UnrecognizedClientException",),
        }[failure]
        assert any(reason in s.provider.describe()["model_discovery"] for reason in expected)
        # the naming patterns apply meanwhile
        assert (await s.ask("claude-opus-5-5")).model == "claude-opus-5-5"
    assert DEFAULT_SECRET_ACCESS_KEY not in caplog.text


async def test_bedrock_discovery_with_an_api_key_over_tls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pki = make_pki(tmp_path)
    async with run_emulator(provider="bedrock", ssl_context=pki.server_context(False)) as emulator:
        env = {
            "GATEWAY_PROVIDER": "bedrock",
            "AWS_REGION": "us-east-1",
            "AWS_BEARER_TOKEN_BEDROCK": DEFAULT_API_KEY,
            "ANTHROPIC_BEDROCK_BASE_URL": emulator.base_url,
            "GATEWAY_BEDROCK_CONTROL_URL": emulator.base_url,
            "GATEWAY_CA_BUNDLE": str(pki.ca_cert),
            **DISCOVERY,
            **isolated_aws_files(tmp_path),
        }
        apply_aws_env(monkeypatch, {k: v for k, v in env.items() if k != "AWS_BEARER_TOKEN_BEDROCK"})
        async with bedrock_gateway(env) as (server, provider):
            assert provider.catalogue is not None and provider.catalogue.current is not None
            for request in control_requests(emulator):
                assert request.header("authorization") == f"Bearer {DEFAULT_API_KEY}"
            async with anthropic.AsyncAnthropic(api_key=GATEWAY_KEY, base_url=server.base_url) as client:
                reply = await client.messages.create(model="claude-opus-5-5", max_tokens=8, messages=USER)
        assert reply.model == "claude-opus-5-5" and len(control_requests(emulator)) == 2


@pytest.mark.parametrize("bypass", [False, True], ids=["through-proxy", "no-proxy-cidr"])
async def test_bedrock_discovery_uses_the_gateway_egress_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, bypass: bool
) -> None:
    caplog.set_level(logging.DEBUG)
    pki = make_pki(tmp_path)
    async with (
        forward_proxy() as proxy,
        run_emulator(provider="bedrock", ssl_context=pki.server_context(False)) as emulator,
    ):
        env = {
            "GATEWAY_PROVIDER": "bedrock",
            "AWS_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": DEFAULT_ACCESS_KEY_ID,
            "AWS_SECRET_ACCESS_KEY": DEFAULT_SECRET_ACCESS_KEY,
            "ANTHROPIC_BEDROCK_BASE_URL": emulator.base_url,
            "GATEWAY_BEDROCK_CONTROL_URL": emulator.base_url,
            "GATEWAY_CA_BUNDLE": str(pki.ca_cert),
            "HTTPS_PROXY": f"http://egress:proxy-pass-7@127.0.0.1:{proxy.port}",
            "NO_PROXY": "127.0.0.0/8" if bypass else "",
            **DISCOVERY,
            **isolated_aws_files(tmp_path),
        }
        apply_aws_env(monkeypatch, env)
        async with bedrock_gateway(env) as (_, provider):
            assert provider.catalogue is not None and provider.catalogue.current is not None
        assert len(control_requests(emulator)) == 2
        if bypass:
            assert proxy.seen == []
        else:
            assert proxy.seen and set(proxy.seen) == {f"CONNECT 127.0.0.1:{emulator.port}"}
            assert (
                proxy.proxy_authorization[0] == "Basic " + base64.b64encode(b"egress:proxy-pass-7").decode()
            )
    assert "proxy-pass-7" not in caplog.text and DEFAULT_SECRET_ACCESS_KEY not in caplog.text


async def test_bedrock_periodic_refresh_recovers_with_real_botocore(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = free_port()
    env = {
        "GATEWAY_PROVIDER": "bedrock",
        "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": DEFAULT_ACCESS_KEY_ID,
        "AWS_SECRET_ACCESS_KEY": DEFAULT_SECRET_ACCESS_KEY,
        "GATEWAY_BEDROCK_CONTROL_URL": f"http://127.0.0.1:{port}",
        "GATEWAY_MODEL_DISCOVERY_TIMEOUT_S": "10",
        **isolated_aws_files(tmp_path),
    }
    apply_aws_env(monkeypatch, env)
    monkeypatch.setattr(bedrock_discovery, "PAGE_SIZE", 5)  # several ListInferenceProfiles pages
    settings = Settings.from_environ(env)
    auth = SigV4ChainAuth("us-east-1", None, settings)
    await auth.start()
    sleep = StepSleep()
    catalogue = ModelCatalogue(bedrock_fetcher(settings, auth), interval_s=300, timeout_s=10, sleep=sleep)
    await catalogue.start()  # the control plane is down
    assert catalogue.current is None and catalogue.failures == 1
    async with run_emulator(provider="bedrock", port=port) as emulator:
        await sleep.step()  # 300 s later: the control plane answers
        assert catalogue.current is not None and "us.anthropic.claude-opus-5-5" in catalogue.current.ids
        pages = [r.path for r in control_requests(emulator) if r.path_only == "/inference-profiles"]
        # 14 models x (us, global) + 1 application profile = 29 profiles: 6 pages of 5
        assert len(pages) == 6 and pages[1] == "/inference-profiles?maxResults=5&nextToken=5"
        first = catalogue.current
        await sleep.step()
        assert catalogue.reads == 2 and catalogue.current.ids == first.ids
    await sleep.step()  # down again: the last catalogue is kept
    await catalogue.close()
    assert catalogue.current.ids == first.ids and catalogue.failures == 2
    assert sleep.calls == [300, 300, 300, 300]


@contextlib.asynccontextmanager
async def vertex_stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **extra: str) -> AsyncIterator[Stack]:
    async with vertex_upstream(tmp_path, monkeypatch) as (env, emulator):
        settings = gateway_settings(env, **extra)
        provider = VertexProvider(settings)
        app = create_app(settings, provider, metrics=GatewayMetrics())
        async with running(app, "127.0.0.1", 0) as server:
            stack = Stack(server.base_url, emulator, provider, VERTEX_GATEWAY_KEY)
            async with stack.client:
                yield stack


def predicts(emulator: RunningEmulator) -> list[str]:
    return [
        r.path_only.rsplit("/", 1)[1] for r in emulator.requests if r.path_only.startswith("/v1/projects/")
    ]


async def test_vertex_patterns_serve_the_newest_ids(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with vertex_stack(tmp_path, monkeypatch) as s:
        for model in ("claude-opus-5-5", "claude-sonnet-5-5", "claude-haiku-4-5"):
            assert (await s.ask(model)).content
        with pytest.raises(anthropic.NotFoundError) as info:
            await s.ask("claude-haiku-5-5")
        assert error_of(info.value) == helpful("claude-haiku-5-5", "vertex")
        assert predicts(s.emulator) == [
            "claude-opus-5-5:rawPredict",
            "claude-sonnet-5-5:rawPredict",
            "claude-haiku-4-5@20251001:rawPredict",
            "claude-haiku-5-5:rawPredict",  # by pattern; Vertex answers NOT_FOUND
        ]


async def test_vertex_discovery_with_google_auth(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vertex_discovery, "PAGE_SIZE", 4)  # several ListPublisherModels pages
    async with vertex_stack(tmp_path, monkeypatch, **DISCOVERY) as s:
        lists = [r for r in s.emulator.requests if r.path_only == "/v1beta1/publishers/anthropic/models"]
        assert [r.path for r in lists[:2]] == [
            "/v1beta1/publishers/anthropic/models?pageSize=4",
            "/v1beta1/publishers/anthropic/models?pageSize=4&pageToken=4",
        ]
        assert len(lists) == 4 and token_requests(s.emulator) == 1  # a google-auth service-account token
        assert all(r.header("authorization").startswith("Bearer ") for r in lists)
        served = s.provider.catalogue.current.ids
        assert {"claude-opus-5-5", "claude-sonnet-5-5", "claude-haiku-4-5@20251001"} <= served
        assert (await s.ask("claude-opus-5-5")).content
        with pytest.raises(anthropic.NotFoundError) as info:
            await s.ask("claude-haiku-5-5")
        assert error_of(info.value) == helpful("claude-haiku-5-5", "vertex")
        assert predicts(s.emulator) == ["claude-opus-5-5:rawPredict"]  # refused before it left
        listed = await s.listed()
        table = [entry.alias for entry in FIRST_PARTY_MODELS if entry.vertex is not None]
        assert listed == ["claude-3-haiku-20240307", *table]


async def test_vertex_model_map_with_discovery(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mapping = '{"claude-haiku-5-5": "claude-haiku-4-5@20251001"}'
    async with vertex_stack(tmp_path, monkeypatch, GATEWAY_MODEL_MAP=mapping, **DISCOVERY) as s:
        assert (await s.ask("claude-haiku-5-5")).model == "claude-haiku-4-5-20251001"
        assert predicts(s.emulator) == ["claude-haiku-4-5@20251001:rawPredict"]
        assert "claude-haiku-5-5" in await s.listed()
