"""What an emulator received, as prefix segments: the cache-efficiency benchmark's evidence of
byte-identical prefixes turn over turn (see :mod:`bench.cache_efficiency`)."""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from emulators.prompt import flatten_prompt
from emulators.recorder import RecordedRequest

# --- what the upstream received -------------------------------------------------------------------


def _strip_markers(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_markers(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_strip_markers(v) for v in value]
    return value


def _bytes(value: Any, *, sort: bool = False) -> bytes:
    return orjson.dumps(_strip_markers(value), option=orjson.OPT_SORT_KEYS if sort else 0)


def is_messages_request(record: RecordedRequest) -> bool:
    """A model turn on any upstream (not count_tokens, models or token endpoints)."""
    path = record.path_only
    if record.method != "POST" or "count" in path:
        return False
    return path.endswith(
        ("/v1/messages", "/invoke", "/invoke-with-response-stream", ":rawPredict", ":streamRawPredict")
    )


def _is_billing(block: Any) -> bool:
    return (
        isinstance(block, dict)
        and block.get("type") == "text"
        and "cache_control" not in block
        and str(block.get("text", "")).startswith("x-anthropic-billing-header:")
    )


@dataclass(frozen=True)
class UpstreamPrefix:
    """The cacheable prefix of one upstream request, in comparable form.

    Byte strings keep the received key order (a re-ordered tool schema renders differently);
    the ``*_sorted`` twins tell a key-order-only change apart.
    """

    model: str
    betas: tuple[str, ...]  # in the order sent
    tools: bytes
    tools_sorted: bytes
    system: bytes  # every system block but a leading billing header block
    system_sorted: bytes
    billing: str  # the billing header text ("" if none)
    messages: tuple[bytes, ...]
    messages_sorted: tuple[bytes, ...]
    body: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def of(cls, provider: str, record: RecordedRequest) -> UpstreamPrefix:
        body = record.json()
        if not isinstance(body, dict):
            raise ValueError(f"{provider}: upstream body is not a JSON object")
        path = record.path_only
        betas = [b.strip() for v in record.header_values("anthropic-beta") for b in v.split(",") if b.strip()]
        if provider == "bedrock":  # /model/{id}/invoke-with-response-stream; betas in header and body
            model = urllib.parse.unquote(path.split("/model/", 1)[1].rsplit("/", 1)[0])
            betas += [str(b) for b in body.get("anthropic_beta") or [] if str(b) not in betas]
        elif provider == "vertex":  # .../publishers/anthropic/models/{model}:streamRawPredict
            model = urllib.parse.unquote(path.rsplit("/models/", 1)[1].split(":", 1)[0])
        else:
            model = str(body.get("model", ""))
        system = body.get("system")
        blocks = system if isinstance(system, list) else [] if system is None else [system]
        billing = ""
        if blocks and _is_billing(blocks[0]):
            billing = str(blocks[0]["text"])
            blocks = blocks[1:]
        tools = body.get("tools") or []
        messages = body.get("messages") or []
        return cls(
            model=model,
            betas=tuple(betas),
            tools=_bytes(tools),
            tools_sorted=_bytes(tools, sort=True),
            system=_bytes(blocks),
            system_sorted=_bytes(blocks, sort=True),
            billing=billing,
            messages=tuple(_bytes(m) for m in messages),
            messages_sorted=tuple(_bytes(m, sort=True) for m in messages),
            body=body,
        )


def _cch(billing: str) -> str:
    found = re.search(r"cch=[0-9a-fA-F]*", billing)
    return found.group(0) if found else repr(billing[-24:])


def prefix_changes(previous: UpstreamPrefix, current: UpstreamPrefix, billing_in_key: bool) -> list[str]:
    """What of ``previous``'s prefix ``current`` does not repeat (empty: the prefix is intact)."""
    changes: list[str] = []
    if previous.model != current.model:
        changes.append(f"model {previous.model} -> {current.model}")
    if set(previous.betas) != set(current.betas):
        gone = sorted(set(previous.betas) - set(current.betas))
        added = sorted(set(current.betas) - set(previous.betas))
        changes.append(f"betas -{','.join(gone) or '()'} +{','.join(added) or '()'}")
    for name, old, new, old_sorted, new_sorted in (
        ("tools", previous.tools, current.tools, previous.tools_sorted, current.tools_sorted),
        ("system", previous.system, current.system, previous.system_sorted, current.system_sorted),
    ):
        if old != new:
            changes.append(f"{name}{' (key order only)' if old_sorted == new_sorted else ''}")
    if billing_in_key and previous.billing != current.billing:
        changes.append(f"billing header {_cch(previous.billing)} -> {_cch(current.billing)}")
    shared = len(previous.messages)
    if len(current.messages) < shared:
        changes.append(f"history shortened {shared} -> {len(current.messages)} messages")
    else:
        for index in range(shared):
            if previous.messages[index] != current.messages[index]:
                order_only = previous.messages_sorted[index] == current.messages_sorted[index]
                changes.append(f"messages[{index}]{' (key order only)' if order_only else ''}")
                break
    return changes


@dataclass(frozen=True)
class PromptTokens:
    """The emulator's token view of one upstream request (its own flattening and token rule)."""

    total: int
    uncacheable: int  # billing header block + per-request overhead
    cached_prefix: int  # tokens up to and including the last breakpoint: what this request caches

    @classmethod
    def of(cls, body: Mapping[str, Any]) -> PromptTokens:
        flat = flatten_prompt(dict(body))
        breakpoints = flat.breakpoints
        cached = sum(b.tokens for b in flat.blocks[: breakpoints[-1] + 1]) if breakpoints else 0
        return cls(flat.total_tokens, flat.uncached_tokens, cached)
