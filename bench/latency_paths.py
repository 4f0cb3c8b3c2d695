"""The requests of the provider-latency benchmark: payload, answer checks, endpoints (direct and
through the gateway) and sequential timed requests (see :mod:`bench.provider_latency`)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import urlsplit

import aiohttp
import orjson
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from bench import payloads, procinfo
from bench.provider_emulator import EmulatorProcess
from gateway.config import Settings
from gateway.providers.bedrock_request import invoke_body_bytes, model_path
from gateway.providers.preparation import resolver_for
from gateway.streaming.eventstream import EventStreamToSSE

PROVIDERS: Final = ("anthropic", "bedrock")
MODES: Final = ("nonstream", "stream")
MODEL: Final = payloads.MODEL
CLIENT_KEY: Final = "bench-key"
API_VERSION: Final = "2023-06-01"
# The scripted model echoes the prompt, then writes filler until max_tokens: with this prompt and
# budget a stream carries 50 text deltas (3 words each), as in the first-party benchmark.
PROMPT: Final = (
    "[[scenario:max_tokens]] In one paragraph, explain what an HTTP keep-alive connection is and "
    "why a reverse proxy should reuse upstream connections."
)
MAX_TOKENS: Final = 246
TARGET_DELTAS: Final = 50
NOISE_PCT: Final = 10.0  # other processes above this share of a core during a run are reported
REQUEST_TIMEOUT_S: Final = 30.0

INHERITED_OUT: Final = ("AWS_", "ANTHROPIC_", "GATEWAY_", "CLAUDE_CODE_", "GOOGLE_", "CLOUD_ML_")
PROXY_VARS: Final = frozenset({"http_proxy", "https_proxy", "all_proxy", "no_proxy"})


# --- the request and the answer checks -----------------------------------------------------------


def request_payload(stream: bool) -> dict[str, Any]:
    """The client's Messages request (the same for every provider, path and run)."""
    body: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": MAX_TOKENS,
        "system": payloads.system_prompt(),
        "messages": [{"role": "user", "content": PROMPT}],
    }
    if stream:
        body["stream"] = True
    return body


def _unmapped(code: str, message: str) -> tuple[str, str]:
    return "api_error", f"{code}: {message}"


def sse_deltas(raw: bytes) -> int:
    """Text deltas of a complete first-party SSE stream; ``ValueError`` if it is not one."""
    if b"event: error" in raw:
        raise ValueError(f"stream carried an error event: {raw[raw.find(b'event: error') :][:200]!r}")
    if not raw.rstrip().endswith(b"}") or b"event: message_stop" not in raw[-200:]:
        raise ValueError("stream did not end with message_stop")
    return raw.count(b"event: content_block_delta")


def eventstream_deltas(raw: bytes) -> int:
    """Text deltas of a complete Bedrock event stream (decoded as the gateway decodes it)."""
    translator = EventStreamToSSE(_unmapped)
    sse = translator.feed(raw)
    if translator.failed:
        raise ValueError("corrupt event stream")
    return sse_deltas(sse)


def message_chars(raw: bytes) -> int:
    """Characters of text in a non-streaming Message; ``ValueError`` if it is not one."""
    try:
        message = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(message, dict) or message.get("type") != "message":
        raise ValueError(f"not a Message: {raw[:200]!r}")
    return sum(len(b.get("text", "")) for b in message.get("content", []) if b.get("type") == "text")


# --- endpoints ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Endpoint:
    """One way to send the request: its URL, body, fresh headers per request, and answer check."""

    url: str
    body: bytes
    headers: Callable[[], dict[str, str]]  # called before the timer starts (Bedrock: signs)
    answer: Callable[[bytes], int]  # text deltas (stream) or text characters (Message)


def _answer_check(stream: bool, eventstream: bool = False) -> Callable[[bytes], int]:
    if not stream:
        return message_chars
    return eventstream_deltas if eventstream else sse_deltas


def first_party_direct(base_url: str, api_key: str, stream: bool) -> Endpoint:
    headers = {"x-api-key": api_key, "anthropic-version": API_VERSION, "content-type": "application/json"}
    return Endpoint(
        base_url.rstrip("/") + "/v1/messages",
        orjson.dumps(request_payload(stream)),
        lambda: dict(headers),
        _answer_check(stream),
    )


def bedrock_model_id(gateway_env: Mapping[str, str]) -> str:
    """The Bedrock model id the gateway, configured by ``gateway_env``, sends for :data:`MODEL`."""
    return resolver_for(Settings.from_environ(gateway_env)).resolve(MODEL)


def bedrock_direct(
    base_url: str, model_id: str, region: str, access_key: str, secret_key: str, stream: bool
) -> Endpoint:
    """InvokeModel[WithResponseStream] as the gateway sends it, SigV4-signed per request."""
    url = base_url.rstrip("/") + model_path(model_id, "invoke-with-response-stream" if stream else "invoke")
    payload = request_payload(stream)
    body = invoke_body_bytes(payload, [])
    credentials = Credentials(access_key, secret_key)
    fixed = {
        "Host": urlsplit(url).netloc,
        "Accept": "application/json",
        "Content-Type": "application/json",
        "Content-Length": str(len(body)),
    }

    def signed() -> dict[str, str]:
        request = AWSRequest(method="POST", url=url, data=body, headers=dict(fixed))
        SigV4Auth(credentials, "bedrock", region).add_auth(request)
        return dict(request.headers.items())

    return Endpoint(url, body, signed, _answer_check(stream, eventstream=True))


def through_gateway(gateway_url: str, stream: bool) -> Endpoint:
    headers = {"x-api-key": CLIENT_KEY, "anthropic-version": API_VERSION, "content-type": "application/json"}
    return Endpoint(
        gateway_url.rstrip("/") + "/v1/messages",
        orjson.dumps(request_payload(stream)),
        lambda: dict(headers),
        _answer_check(stream),
    )


def direct_endpoint(emulator: EmulatorProcess, gateway_env: Mapping[str, str], stream: bool) -> Endpoint:
    if emulator.provider == "anthropic":
        return first_party_direct(emulator.base_url, emulator.env["ANTHROPIC_API_KEY"], stream)
    if emulator.provider == "bedrock":
        pe = emulator.process_env
        return bedrock_direct(
            emulator.base_url,
            bedrock_model_id(gateway_env),
            pe["AWS_REGION"],
            pe["AWS_ACCESS_KEY_ID"],
            pe["AWS_SECRET_ACCESS_KEY"],
            stream,
        )
    raise ValueError(f"no direct path for provider {emulator.provider!r}")


# --- sequential timed requests --------------------------------------------------------------------


@dataclass
class Samples:
    latency: list[float] = field(default_factory=list)  # seconds
    sizes: list[int] = field(default_factory=list)  # response body bytes
    answers: Counter[int] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    first_error: str = ""

    cpu_ms: dict[str, float] = field(default_factory=dict)  # role -> CPU ms while this path ran
    other_pct_s: float = 0.0  # processes outside the benchmark: % of a core x seconds
    wall_s: float = 0.0

    def fail(self, kind: str, detail: str) -> None:
        self.errors[kind] += 1
        if not self.first_error:
            self.first_error = f"{kind}: {detail}"

    def add(self, block: Samples, cpu: procinfo.CpuShares, wall_s: float) -> None:
        """Merge a block of this path's requests, with the CPU used while it ran."""
        self.latency += block.latency
        self.sizes += block.sizes
        self.answers.update(block.answers)
        self.errors.update(block.errors)
        self.first_error = self.first_error or block.first_error
        for role, pct in cpu.per_role.items():
            self.cpu_ms[role] = self.cpu_ms.get(role, 0.0) + pct / 100.0 * wall_s * 1e3
        self.other_pct_s += cpu.other_processes * wall_s
        self.wall_s += wall_s


async def timed_requests(session: aiohttp.ClientSession, endpoint: Endpoint, n: int) -> Samples:
    """``n`` requests one after the other; each timed from the POST to its last body byte."""
    samples = Samples()
    perf = time.perf_counter
    for _ in range(n):
        headers = endpoint.headers()
        try:
            started = perf()
            async with session.post(endpoint.url, data=endpoint.body, headers=headers) as response:
                raw = await response.read()
                elapsed = perf() - started
                status = response.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            samples.fail(type(exc).__name__, repr(exc))
            continue
        if status != 200:
            samples.fail(f"HTTP {status}", raw[:300].decode("utf-8", "replace"))
            continue
        try:
            units = endpoint.answer(raw)
        except ValueError as exc:
            samples.fail("bad body", str(exc))
            continue
        samples.latency.append(elapsed)
        samples.sizes.append(len(raw))
        samples.answers[units] += 1
    return samples
