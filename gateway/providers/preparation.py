"""The provider-independent part of turning a client request into an upstream request.

Model mapping, the fold of ``role: "system"`` messages for targets configured to refuse them
(:mod:`.system_fold`) and the per-provider beta table (:mod:`.betas`, :mod:`.shaping`) run here
in that order; what differs per provider beyond the table (where the model goes, which version
string, which URL) stays in the provider. The client's body is re-serialised only when something in
it had to change, and then deterministically (orjson keeps key order; every transform depends only
on the request and the settings), so an unchanged prefix stays byte-identical turn after turn.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

import orjson

from gateway.config import ProviderName, Settings
from gateway.errors import ClientInputError
from gateway.headers import header_value
from gateway.providers.base import ClientRequest
from gateway.providers.betas import BetaPolicy, parse_beta_header
from gateway.providers.model_discovery import ModelCatalogue
from gateway.providers.models import ModelResolver, UnknownModel, bedrock_geography
from gateway.providers.system_fold import applies, fold_system_messages

log = logging.getLogger("switchyard.preparation")

MID_CONVERSATION_SYSTEM: Final = "mid-conversation-system-2026-04-07"


@dataclass(frozen=True, slots=True)
class PreparedRequest:
    """A client request with the upstream's model id and betas decided."""

    model: str  # the upstream id ("" when the client sent none)
    payload: dict[str, Any]  # a private copy; providers may reshape it further
    betas: list[str]  # the ``anthropic-beta`` header
    dropped_betas: list[str]
    body_changed: bool
    body_betas: tuple[str, ...] = ()  # Bedrock's body ``anthropic_beta`` list

    def body_bytes(self, original: ClientRequest) -> bytes:
        """The client's bytes when nothing changed, else a deterministic re-serialisation."""
        return orjson.dumps(self.payload) if self.body_changed else original.body


def resolver_for(settings: Settings, catalogue: ModelCatalogue | None = None) -> ModelResolver:
    prefix = settings.bedrock_profile_prefix
    if settings.provider is ProviderName.BEDROCK and prefix is None and settings.aws_region:
        prefix = bedrock_geography(settings.aws_region)
    if prefix in ("", "none"):
        prefix = None
    return ModelResolver(settings.provider, dict(settings.model_map), prefix, catalogue)


def prepare(
    request: ClientRequest,
    provider: ProviderName,
    resolver: ModelResolver,
    policy: BetaPolicy,
    *,
    fold_targets: Iterable[str] = (),
) -> PreparedRequest:
    """Map the model, fold system messages for ``fold_targets`` (``GATEWAY_FOLD_SYSTEM_MESSAGES``)
    and apply the beta table. Unservable models are a 404 ``not_found_error``."""
    payload = copy.deepcopy(dict(request.payload))
    model = request.model
    upstream_model = model
    if model:
        try:
            upstream_model = resolver.resolve(model)
        except UnknownModel as exc:
            raise ClientInputError(404, exc.message, error_type="not_found_error") from None
    betas = parse_beta_header(value for name, value in request.headers if name.lower() == "anthropic-beta")
    fold = applies(fold_targets, model, upstream_model)
    folded = fold and fold_system_messages(payload)
    if fold and MID_CONVERSATION_SYSTEM in betas:  # the target refuses the role, so never its beta
        betas.remove(MID_CONVERSATION_SYSTEM)
        decision = policy.apply(provider, betas, payload)
        decision.dropped.append(MID_CONVERSATION_SYSTEM)
    else:
        decision = policy.apply(provider, betas, payload)
    if decision.dropped:
        log.info(
            "dropped betas the %s upstream does not accept: %s (request %s)",
            provider.value,
            ",".join(decision.dropped),
            request.request_id,
        )
    changed = decision.body_changed or folded
    if upstream_model != model and "model" in payload:
        payload["model"] = upstream_model
        changed = True
    return PreparedRequest(
        model=upstream_model,
        payload=payload,
        betas=decision.header,
        dropped_betas=decision.dropped,
        body_changed=changed,
        body_betas=tuple(decision.body),
    )


def client_header(request: ClientRequest, name: str) -> str | None:
    return header_value(request.headers, name)


def first_party_headers(
    client_headers: list[tuple[str, str]], prepared: PreparedRequest, auth: list[tuple[str, str]]
) -> list[tuple[str, str]]:
    """Client headers plus credentials; ``anthropic-beta`` rewritten only if the policy dropped some."""
    if not prepared.dropped_betas:
        return [*client_headers, *auth]
    headers = [(name, value) for name, value in client_headers if name.lower() != "anthropic-beta"]
    if prepared.betas:
        headers.append(("anthropic-beta", ",".join(prepared.betas)))
    return [*headers, *auth]
