"""The emulators as model-catalogue oracles: what they serve and list, with the clouds' own
clients (the SDK's Bedrock/Vertex modes, botocore's ``bedrock`` control-plane client)."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import anthropic
import pytest
from botocore.config import Config
from botocore.session import Session

from emulators import EmulatorConfig, ManualClock, RunningEmulator, run_emulator
from emulators.bedrock_config import (
    DEFAULT_ACCESS_KEY_ID,
    DEFAULT_PROFILE_ARN,
    DEFAULT_SECRET_ACCESS_KEY,
)
from emulators.config import DEFAULT_VERTEX_TOKEN

USER: Any = [{"role": "user", "content": "hi"}]


def bedrock_control(emulator: RunningEmulator) -> Any:
    return Session().create_client(
        "bedrock",
        region_name="us-east-1",
        endpoint_url=emulator.base_url,
        aws_access_key_id=DEFAULT_ACCESS_KEY_ID,
        aws_secret_access_key=DEFAULT_SECRET_ACCESS_KEY,
        config=Config(retries={"total_max_attempts": 1}, proxies={}),
    )


async def test_bedrock_serves_and_lists_what_claude_codes_bedrock_mode_uses() -> None:
    async with run_emulator(EmulatorConfig(clock=ManualClock()), provider="bedrock") as emulator:
        client = anthropic.AsyncAnthropicBedrock(
            aws_access_key=DEFAULT_ACCESS_KEY_ID,
            aws_secret_key=DEFAULT_SECRET_ACCESS_KEY,
            aws_region="us-east-1",
            base_url=emulator.base_url,
            max_retries=0,
        )
        async with client:
            for model in ("us.anthropic.claude-opus-5-5", "global.anthropic.claude-opus-5-5"):
                assert (await client.messages.create(model=model, max_tokens=8, messages=USER)).content
            for model in ("us.anthropic.claude-sonnet-5-5", "us.anthropic.claude-haiku-5-5"):
                with pytest.raises(anthropic.NotFoundError):
                    await client.messages.create(model=model, max_tokens=8, messages=USER)

        control = bedrock_control(emulator)
        loop = asyncio.get_running_loop()
        system = await loop.run_in_executor(
            None, lambda: control.list_inference_profiles(typeEquals="SYSTEM_DEFINED")
        )
        ids = {p["inferenceProfileId"] for p in system["inferenceProfileSummaries"]}
        assert {"us.anthropic.claude-opus-5-5", "global.anthropic.claude-opus-5-5"} <= ids
        assert "us.anthropic.claude-sonnet-4-5-20250929-v1:0" in ids
        assert not any("-5-5" in i and "opus" not in i for i in ids) and not any(
            i.startswith("eu.") for i in ids
        )
        opus = next(
            p for p in system["inferenceProfileSummaries"] if p["inferenceProfileId"].endswith("opus-5-5")
        )
        assert opus["status"] == "ACTIVE" and opus["type"] == "SYSTEM_DEFINED"
        assert opus["models"] == [
            {"modelArn": "arn:aws:bedrock:us-east-1::foundation-model/anthropic.claude-opus-5-5"}
        ]
        assert opus["createdAt"].year == 1970  # parsed by botocore as a timestamp

        application = await loop.run_in_executor(
            None, lambda: control.list_inference_profiles(typeEquals="APPLICATION")
        )
        (profile,) = application["inferenceProfileSummaries"]
        assert profile["inferenceProfileArn"] == DEFAULT_PROFILE_ARN

        models = await loop.run_in_executor(
            None, lambda: control.list_foundation_models(byProvider="anthropic", byInferenceType="ON_DEMAND")
        )
        model_ids = {m["modelId"] for m in models["modelSummaries"]}
        assert "anthropic.claude-opus-5-5" in model_ids and len(model_ids) == 14
        none = await loop.run_in_executor(None, lambda: control.list_foundation_models(byProvider="Meta"))
        assert none["modelSummaries"] == []
        control.close()

        async with (
            aiohttp.ClientSession() as http,
            http.get(f"{emulator.base_url}/foundation-models") as unsigned,
        ):
            assert unsigned.status == 403


async def test_vertex_serves_and_lists_what_claude_codes_vertex_mode_uses() -> None:
    async with run_emulator(EmulatorConfig(clock=ManualClock()), provider="vertex") as emulator:
        client = anthropic.AsyncAnthropicVertex(
            region="us-east5",
            project_id="p",
            access_token=DEFAULT_VERTEX_TOKEN,
            base_url=emulator.base_url + "/v1",
            max_retries=0,
        )
        async with client:
            for model in ("claude-opus-5-5", "claude-sonnet-5-5", "claude-haiku-4-5@20251001"):
                assert (await client.messages.create(model=model, max_tokens=8, messages=USER)).content
            for model in ("claude-haiku-5-5", "claude-sonnet-4-5", "claude-fable-5-2"):
                with pytest.raises(anthropic.NotFoundError):
                    await client.messages.create(model=model, max_tokens=8, messages=USER)

        url = f"{emulator.base_url}/v1beta1/publishers/anthropic/models"
        auth = {"authorization": f"Bearer {DEFAULT_VERTEX_TOKEN}"}
        async with aiohttp.ClientSession() as http:
            async with http.get(url, headers=auth) as response:
                assert response.status == 200
                page = await response.json()
            names = [(m["name"], m["versionId"]) for m in page["publisherModels"]]
            assert names[:2] == [
                ("publishers/anthropic/models/claude-opus-5-5", "001"),
                ("publishers/anthropic/models/claude-sonnet-5-5", "001"),
            ]
            assert ("publishers/anthropic/models/claude-haiku-4-5", "20251001") in names
            assert not any("haiku-5-5" in name for name, _ in names) and "nextPageToken" not in page
            async with http.get(url, headers=auth, params={"pageSize": "10", "pageToken": "10"}) as response:
                rest = await response.json()
            assert len(rest["publisherModels"]) == len(names) - 10
            async with http.get(url) as response:
                assert response.status == 401
                assert (await response.json())["error"]["status"] == "UNAUTHENTICATED"
            async with http.get(url, headers=auth, params={"pageSize": "x"}) as response:
                assert response.status == 400
