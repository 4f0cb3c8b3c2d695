"""The real Claude Code CLI through the gateway to each of the four providers' emulators.

For every provider and for two Claude Code versions (2.1.197, the captures' version, and the newest
2.1.x on npm) a ``claude -p`` session that runs a tool completes through the gateway; its second
model call reads the prompt cache; and what the gateway sent the cloud has the shape Claude Code
itself sends that cloud in its own provider mode (``CLAUDE_CODE_USE_BEDROCK`` / ``_VERTEX`` /
``_FOUNDRY`` straight at the same emulator, run first as the reference): the same top-level body
fields, the same ``anthropic_version``, the same message roles, cache breakpoints of the same shape,
and no beta the provider-mode client would not send.

The emulators refuse what the clouds refuse from their own, cited rules (not the gateway's tables),
so a first-party-only beta or body field that leaks through fails the session here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from emulators.recorder import RecordedRequest
from tests.e2e.claude_code_stack import provider_stack
from tests.support.claude_code import cli, run_claude, versions_under_test
from tests.support.claude_code_betas import (
    CC197_OPUS_FIRST_PARTY,
    CC332_BEDROCK_BODY,
    CC332_BEDROCK_HEADER,
    CC332_FIRST_PARTY,
    CC332_VERTEX_HEADER,
)

PROVIDERS = ("anthropic", "bedrock", "vertex", "foundry")

# What Claude Code sends each cloud in its own provider mode, besides the live reference run:
# ../shared/design/providers.md section 7 (2.1.332, default model) and the 2.1.197 captures in
# tests/fixtures/real-clients/ (047/048 Bedrock, 050/051 Vertex).
PROVIDER_MODE_EVIDENCE: dict[str, dict[str, set[str]]] = {
    "bedrock": {
        "header_betas": set(CC332_BEDROCK_HEADER),
        "body_betas": set(CC332_BEDROCK_BODY),
        "roles": {"user", "assistant", "system"},
    },
    "vertex": {
        "header_betas": set(CC332_VERTEX_HEADER),
        "body_betas": set(),
        "roles": {"user", "assistant", "system"},
    },
    # Foundry is the first-party surface: issue 11 reports both versions' first-party-mode traffic
    # (fixtures README section 1.3, providers.md section 7 "first party") working on real Foundry
    "foundry": {
        "header_betas": {*CC332_FIRST_PARTY, *CC197_OPUS_FIRST_PARTY},
        "body_betas": set(),
        "roles": {"user", "assistant", "system"},
    },
}
# The emulator's scripted model: call Bash once, then summarise its result (emulators/README.md)
PROMPT = "[[scenario:tool_use]] [[tool:Bash]] run the command"
ARGS = ("-p", PROMPT, "--model", "opus", "--allowedTools", "Bash", "--max-turns", "4")

pytestmark = pytest.mark.timeout(300)


def _is_model_call(request: RecordedRequest) -> bool:
    path = request.path_only
    if "count_tokens" in path or "count-tokens" in path:
        return False
    return path.endswith(
        ("/v1/messages", "/invoke", "/invoke-with-response-stream", ":rawPredict", ":streamRawPredict")
    )


def model_calls(requests: list[RecordedRequest]) -> list[RecordedRequest]:
    return [r for r in requests if r.method == "POST" and _is_model_call(r)]


def _split(value: str | None) -> set[str]:
    return {item.strip() for item in (value or "").split(",") if item.strip()}


def _cache_controls(body: dict[str, Any]) -> list[str]:
    found: list[str] = []
    for section in ("tools", "system"):
        for block in body.get(section) or []:
            if isinstance(block, dict) and "cache_control" in block:
                found.append(f"{section}:{json.dumps(block['cache_control'], sort_keys=True)}")
    for message in body.get("messages", []):
        content = message.get("content")
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and "cache_control" in block:
                found.append(f"messages:{json.dumps(block['cache_control'], sort_keys=True)}")
    return found


def signature(request: RecordedRequest) -> dict[str, Any]:
    """What must agree between the gateway's upstream request and the provider-mode reference."""
    body = json.loads(request.body)
    headers = {name.lower(): value for name, value in request.headers}
    return {
        "verb": request.path_only.rsplit("/", 1)[-1].rsplit(":", 1)[-1],
        "keys": sorted(body),
        "anthropic_version": body.get("anthropic_version", headers.get("anthropic-version")),
        "header_betas": _split(headers.get("anthropic-beta")),
        "body_betas": set(body.get("anthropic_beta", [])),
        "roles": sorted({m.get("role") for m in body.get("messages", [])}),
        "cache_controls": _cache_controls(body),
    }


def assert_provider_mode_shape(provider: str, got: dict[str, Any], reference: list[dict[str, Any]]) -> None:
    """``got`` (a gateway-forwarded request) has the shape of Claude Code's own provider-mode requests."""
    loop_calls = [r for r in reference if "tools" in r["keys"]]  # not the model-availability probes
    assert loop_calls, reference
    want = loop_calls[0]
    evidence = PROVIDER_MODE_EVIDENCE[provider]
    assert got["verb"] == want["verb"]
    assert got["anthropic_version"] == want["anthropic_version"]
    assert set(got["keys"]) == set(want["keys"]), (got["keys"], want["keys"])
    assert set(got["roles"]) <= set().union(evidence["roles"], *(r["roles"] for r in loop_calls))
    for placement in ("header_betas", "body_betas"):
        allowed = set().union(evidence[placement], *(r[placement] for r in loop_calls))
        assert got[placement] <= allowed, (placement, got[placement] - allowed)
    # three breakpoints, plain ephemeral, where Claude Code puts them in that mode
    assert sorted(got["cache_controls"]) == sorted(want["cache_controls"])


@pytest.mark.parametrize("version", versions_under_test())
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_claude_code_tool_session(
    provider: str, version: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``claude -p`` with a Bash tool round trip, through the gateway, on ``provider``."""
    binary = cli(version)
    workdir = tmp_path / "work"
    workdir.mkdir()
    async with provider_stack(provider, tmp_path, monkeypatch) as stack:
        reference: list[dict[str, Any]] = []
        own_env = stack.own_mode_env()
        if own_env is not None:  # the reference: Claude Code in its own provider mode
            own = await run_claude(binary, ARGS, own_env, workdir)
            assert own.result is not None and not own.result.get("is_error"), own.describe()
            reference = [signature(r) for r in model_calls(stack.emulator.requests)]
            stack.emulator.request_log.clear()

        run = await run_claude(binary, ARGS, stack.through_gateway_env(), workdir)
        assert run.result is not None, run.describe()
        assert not run.result.get("is_error"), run.describe()
        assert run.result.get("num_turns", 0) >= 2, run.describe()
        calls = model_calls(stack.emulator.requests)
        assert len(calls) >= 2, [r.path for r in stack.emulator.requests]
        # the tool ran and its result went back to the model in the last call
        last = json.loads(calls[-1].body)
        assert any(
            isinstance(block, dict) and block.get("type") == "tool_result"
            for message in last["messages"]
            for block in (message["content"] if isinstance(message["content"], list) else [])
        )
        # turn 2 read the prompt cache turn 1 wrote (Claude Code's own usage report)
        usage = run.result["usage"]
        assert usage["cache_read_input_tokens"] > 0, usage
        for call in calls:
            if reference:
                assert_provider_mode_shape(provider, signature(call), reference)


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_newest_claude_code_default_model(
    provider: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The newest Claude Code with no ``--model`` (``claude-opus-5-5`` on 2.1.332) works everywhere."""
    version = versions_under_test()[-1]
    binary = cli(version)
    workdir = tmp_path / "work"
    workdir.mkdir()
    async with provider_stack(provider, tmp_path, monkeypatch) as stack:
        run = await run_claude(binary, ("-p", "say hi"), stack.through_gateway_env(), workdir)
        assert run.result is not None and not run.result.get("is_error"), run.describe()
        assert model_calls(stack.emulator.requests)
