"""Turning a client request into the request every upstream attempt sends, once per request.

Nothing is copied when nothing changes; a change copies only what it changes and re-serialises
deterministically, so an unchanged prefix stays byte-identical turn after turn.

Details: docs/internals/gateway-providers.md
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any, Final

from gateway.config import Settings
from gateway.errors import ClientInputError
from gateway.provider_names import ProviderName
from gateway.providers.betas import BetaPolicy, request_betas
from gateway.providers.model_discovery import ModelCatalogue
from gateway.providers.models import ModelResolver, UnknownModel, bedrock_geography
from gateway.providers.request import ClientRequest, Framed, Operation, PreparedRequest, Shaped
from gateway.providers.system_fold import applies, fold_system_messages

__all__ = [
    "FIRST_PARTY_PATHS",
    "Frame",
    "Framed",
    "Preparer",
    "Shaped",
    "first_party_headers",
    "resolver_for",
    "shape",
]

log = logging.getLogger("switchyard.preparation")

MID_CONVERSATION_SYSTEM: Final = "mid-conversation-system-2026-04-07"
FIRST_PARTY_PATHS: Final = {
    Operation.MESSAGES: "/v1/messages",
    Operation.COUNT_TOKENS: "/v1/messages/count_tokens",
}  # the first party's and Foundry's (below its ``/anthropic`` root)


Frame = Callable[[Shaped], Framed]


def resolver_for(settings: Settings, catalogue: ModelCatalogue | None = None) -> ModelResolver:
    prefix = settings.bedrock.profile_prefix
    if settings.provider is ProviderName.BEDROCK and prefix is None and settings.bedrock.region:
        prefix = bedrock_geography(settings.bedrock.region)
    if prefix in ("", "none"):
        prefix = None
    return ModelResolver(settings.provider, dict(settings.models.model_map), prefix, catalogue)


def shape(
    request: ClientRequest,
    provider: ProviderName,
    resolver: ModelResolver,
    policy: BetaPolicy,
    *,
    fold_targets: Iterable[str] = (),
) -> Shaped:
    """Map the model, fold system messages for ``fold_targets`` (``GATEWAY_FOLD_SYSTEM_MESSAGES``)
    and apply the beta table. Unservable models are a 404 ``not_found_error``."""
    original = request.payload
    model = request.model
    upstream_model = model
    if model:
        try:
            upstream_model = resolver.resolve(model)
        except UnknownModel as exc:
            raise ClientInputError(404, exc.message, error_type="not_found_error") from None
    betas = request_betas(request.headers)
    draft: dict[str, Any] | None = None  # the copy, made when something is about to change
    changed = False
    fold = bool(fold_targets) and applies(fold_targets, model, upstream_model)
    if fold:
        draft = dict(original)
        changed = fold_system_messages(draft)
    refused = fold and MID_CONVERSATION_SYSTEM in betas  # the target refuses the role, so its beta
    if refused:
        betas = tuple(beta for beta in betas if beta != MID_CONVERSATION_SYSTEM)
    header: tuple[str, ...] = betas  # a surface that takes every beta gets them as sent
    body_betas: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()
    if refused or not policy.passes_all(provider):
        decision = policy.decide(provider, betas, original if draft is None else draft)
        if policy.strips_body(provider, decision.dropped):
            if draft is None:
                draft = dict(original)
            changed = policy.strip(provider, decision.dropped, draft) or changed
        header, body_betas = tuple(decision.header), tuple(decision.body)
        dropped = (*decision.dropped, MID_CONVERSATION_SYSTEM) if refused else tuple(decision.dropped)
    if dropped:
        log.info(
            "dropped betas the %s upstream does not accept: %s (request %s)",
            provider.value,
            ",".join(dropped),
            request.request_id,
        )
    if upstream_model != model and "model" in original:
        if draft is None:
            draft = dict(original)
        draft["model"] = upstream_model
        changed = True
    return Shaped(
        client=request,
        upstream_model=upstream_model,
        payload=draft if changed and draft is not None else original,
        betas=header,
        body_betas=body_betas,
        dropped_betas=dropped,
        body_changed=changed,
    )


class Preparer:
    """One provider's preparation: its resolver, beta policy and fold targets (from the settings)
    and its ``frame`` hook. Made once per provider; ``prepare`` runs once per request."""

    def __init__(
        self,
        settings: Settings,
        provider: ProviderName,
        frame: Frame,
        catalogue: ModelCatalogue | None = None,
    ) -> None:
        self.provider = provider
        self.resolver = resolver_for(settings, catalogue)
        self.policy = BetaPolicy.from_settings(settings.models.beta_policy)
        self.fold_targets = settings.models.fold_system_messages
        self._frame = frame

    def prepare(self, client: ClientRequest) -> PreparedRequest:
        """The request every attempt sends (``ClientInputError`` when it cannot be served)."""
        return self._framed(
            shape(client, self.provider, self.resolver, self.policy, fold_targets=self.fold_targets)
        )

    def non_streaming(self, prepared: PreparedRequest) -> PreparedRequest:
        """``prepared`` without ``stream``: the model and beta decisions kept, only re-framed."""
        shaped = prepared.shaped
        if "stream" not in shaped.payload:
            return prepared
        payload = {k: v for k, v in shaped.payload.items() if k != "stream"}
        return self._framed(shaped._replace(client=shaped.client.as_non_streaming(), payload=payload))

    def _framed(self, shaped: Shaped) -> PreparedRequest:
        path, body, headers, unsupported = self._frame(shaped)
        return PreparedRequest(shaped, path, body, headers, unsupported, self)


def first_party_headers(shaped: Shaped, *extra: tuple[str, str]) -> tuple[tuple[str, str], ...]:
    """The client's headers and ``extra``; ``anthropic-beta`` rewritten only if the policy dropped
    some."""
    headers = shaped.client.headers
    if not shaped.dropped_betas:
        return (*headers, *extra)
    kept = [(name, value) for name, value in headers if name.lower() != "anthropic-beta"]
    if shaped.betas:
        kept.append(("anthropic-beta", ",".join(shaped.betas)))
    return (*kept, *extra)
