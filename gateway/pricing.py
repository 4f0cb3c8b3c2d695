"""What a request cost, in USD, from its final usage: a price table per provider and model.

The built-in table (USD per million tokens) is Anthropic's public pricing as of late 2025, some
newer models *assumed* to continue their tier; ``GATEWAY_PRICING_FILE`` overrides entries. Sources,
the table, cache and long-context rules, what is not modelled and the override file's format:
README, "Cost (gateway_cost_usd_total)".
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gateway.provider_names import ProviderName
from gateway.providers.models import metric_label
from gateway.streaming.usage import Usage
from gateway.values import value

PER_TOKENS: Final = 1_000_000
CACHE_READ_MULTIPLIER: Final = 0.1
CACHE_WRITE_5M_MULTIPLIER: Final = 1.25
CACHE_WRITE_1H_MULTIPLIER: Final = 2.0
LONG_CONTEXT_ABOVE: Final = 200_000

TOKEN_KINDS: Final = ("input", "output", "cache_read", "cache_write_5m", "cache_write_1h")


class PricingError(ValueError):
    """The pricing file is unreadable or invalid; the message says where."""


@dataclass(frozen=True, slots=True)
class Rates:
    """USD per million tokens of each kind."""

    input: float
    output: float
    cache_read: float
    cache_write_5m: float
    cache_write_1h: float

    @classmethod
    def from_base(
        cls,
        input: float,
        output: float,
        *,
        cache_read: float | None = None,
        cache_write_5m: float | None = None,
        cache_write_1h: float | None = None,
    ) -> Rates:
        """Rates from the base input/output prices; cache rates default to the multipliers."""
        return cls(
            input=input,
            output=output,
            cache_read=input * CACHE_READ_MULTIPLIER if cache_read is None else cache_read,
            cache_write_5m=input * CACHE_WRITE_5M_MULTIPLIER if cache_write_5m is None else cache_write_5m,
            cache_write_1h=input * CACHE_WRITE_1H_MULTIPLIER if cache_write_1h is None else cache_write_1h,
        )

    def scaled(self, factor: float) -> Rates:
        return Rates(*(rate * factor for rate in self.as_tuple()))

    def as_tuple(self) -> tuple[float, float, float, float, float]:
        """The rates in ``TOKEN_KINDS`` order."""
        return (self.input, self.output, self.cache_read, self.cache_write_5m, self.cache_write_1h)


@dataclass(frozen=True, slots=True)
class ModelPrice:
    standard: Rates
    long_context: Rates | None = None
    long_context_above: int = LONG_CONTEXT_ABOVE

    def rates_for(self, usage: Usage) -> Rates:
        """The rates that apply to a request with this usage (long context above the threshold)."""
        if self.long_context is not None and total_input_tokens(usage) > self.long_context_above:
            return self.long_context
        return self.standard

    def scaled(self, factor: float) -> ModelPrice:
        if factor == 1.0:
            return self
        long_context = self.long_context.scaled(factor) if self.long_context is not None else None
        return replace(self, standard=self.standard.scaled(factor), long_context=long_context)


@value
class Cost:
    """USD per token kind for one request."""

    input: float = 0.0
    output: float = 0.0
    cache_read: float = 0.0
    cache_write_5m: float = 0.0
    cache_write_1h: float = 0.0

    @property
    def total(self) -> float:
        return self.input + self.output + self.cache_read + self.cache_write_5m + self.cache_write_1h

    def by_kind(self) -> tuple[tuple[str, float], ...]:
        values = (self.input, self.output, self.cache_read, self.cache_write_5m, self.cache_write_1h)
        return tuple(zip(TOKEN_KINDS, values, strict=True))


def total_input_tokens(usage: Usage) -> int:
    """Every input token of the request: uncached, cache read and cache written."""
    return (
        usage.input_tokens
        + usage.cache_read_input_tokens
        + usage.cache_write_5m_tokens
        + usage.cache_write_1h_tokens
    )


def cost_of(usage: Usage, rates: Rates) -> Cost:
    """Each token kind priced once at its own rate (``input_tokens`` excludes cached tokens)."""
    return Cost(
        input=usage.input_tokens * rates.input / PER_TOKENS,
        output=usage.output_tokens * rates.output / PER_TOKENS,
        cache_read=usage.cache_read_input_tokens * rates.cache_read / PER_TOKENS,
        cache_write_5m=usage.cache_write_5m_tokens * rates.cache_write_5m / PER_TOKENS,
        cache_write_1h=usage.cache_write_1h_tokens * rates.cache_write_1h / PER_TOKENS,
    )


def _tier(
    input: float, output: float, long_input: float | None = None, long_output: float | None = None
) -> ModelPrice:
    long_context = Rates.from_base(long_input, long_output) if long_input and long_output else None
    return ModelPrice(Rates.from_base(input, output), long_context)


_OPUS_45: Final = _tier(5, 25)
_OPUS_46: Final = _tier(5, 25, 10, 37.5)  # assumed
_OPUS_4: Final = _tier(15, 75)
_SONNET_4: Final = _tier(3, 15, 6, 22.5)
_SONNET_37: Final = _tier(3, 15)
_HAIKU_45: Final = _tier(1, 5)
_HAIKU_35: Final = _tier(0.8, 4)

BUILTIN_MODELS: Final[Mapping[str, ModelPrice]] = {
    "claude-opus-4-8": _OPUS_45,  # assumed
    "claude-opus-4-7": _OPUS_45,  # assumed
    "claude-opus-4-6": _OPUS_46,  # assumed
    "claude-opus-4-5": _OPUS_45,
    "claude-opus-4-1": _OPUS_4,
    "claude-opus-4-0": _OPUS_4,
    "claude-sonnet-4-6": _SONNET_4,  # assumed
    "claude-sonnet-4-5": _SONNET_4,
    "claude-sonnet-4-0": _SONNET_4,
    "claude-3-7-sonnet-latest": _SONNET_37,
    "claude-haiku-4-5": _HAIKU_45,
    "claude-3-5-haiku-latest": _HAIKU_35,
}
BUILTIN_DEFAULT: Final = _OPUS_4


class PriceTable:
    """Prices per provider and model; ``cost`` prices one request's final usage."""

    def __init__(
        self,
        models: Mapping[str, ModelPrice],
        default: ModelPrice,
        *,
        provider_models: Mapping[str, Mapping[str, ModelPrice]] | None = None,
        provider_multipliers: Mapping[str, float] | None = None,
        source: str = "built-in",
    ) -> None:
        self.models = dict(models)
        self.default = default
        self.provider_models = {name: dict(table) for name, table in (provider_models or {}).items()}
        self.provider_multipliers = dict(provider_multipliers or {})
        self.source = source

    def price(self, provider: str, model: str, upstream_model: str | None = None) -> ModelPrice:
        """The price of ``model`` (any client-visible or provider-native name) on ``provider``.

        ``upstream_model`` is the id the upstream was sent (a ``GATEWAY_MODEL_MAP`` target): it
        answered, so it is looked up first; the client's name after it, then ``default``."""
        own = self.provider_models.get(provider, {})
        names = (model,) if not upstream_model or upstream_model == model else (upstream_model, model)
        for name in names:
            label = metric_label(name)
            for key in (name, label):
                if key in own:
                    return own[key]
            shared = self.models.get(name) or self.models.get(label)
            if shared is not None:
                return shared.scaled(self.provider_multipliers.get(provider, 1.0))
        return self.default.scaled(self.provider_multipliers.get(provider, 1.0))

    def cost(self, provider: str, model: str, usage: Usage, upstream_model: str | None = None) -> Cost:
        return cost_of(usage, self.price(provider, model, upstream_model).rates_for(usage))


DEFAULT_TABLE: Final = PriceTable(BUILTIN_MODELS, BUILTIN_DEFAULT)


# -- the override file -----------------------------------------------------------------------
# Built on first use. No Infinity or NaN (Python's json reads both): a price of either makes every
# cost, and so gateway_cost_usd_total, inf or nan for good (inf x 0 tokens is nan).
_OVERRIDE_MODEL: Final = ConfigDict(extra="forbid", frozen=True, defer_build=True, allow_inf_nan=False)


class _RatesIn(BaseModel):
    model_config = _OVERRIDE_MODEL

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cache_read: float | None = Field(None, ge=0)
    cache_write_5m: float | None = Field(None, ge=0)
    cache_write_1h: float | None = Field(None, ge=0)

    def rates(self) -> Rates:
        return Rates.from_base(
            self.input,
            self.output,
            cache_read=self.cache_read,
            cache_write_5m=self.cache_write_5m,
            cache_write_1h=self.cache_write_1h,
        )


class _LongContextIn(_RatesIn):
    above_input_tokens: int = Field(LONG_CONTEXT_ABOVE, gt=0)


class _ModelIn(_RatesIn):
    long_context: _LongContextIn | None = None

    def price(self) -> ModelPrice:
        if self.long_context is None:
            return ModelPrice(self.rates())
        return ModelPrice(self.rates(), self.long_context.rates(), self.long_context.above_input_tokens)


class _ProviderIn(BaseModel):
    model_config = _OVERRIDE_MODEL

    multiplier: float = Field(1.0, gt=0)
    models: dict[str, _ModelIn] = Field(default_factory=dict)


class _TableIn(BaseModel):
    model_config = _OVERRIDE_MODEL

    source: str | None = None
    default: _ModelIn | None = None
    models: dict[str, _ModelIn] = Field(default_factory=dict)
    providers: dict[ProviderName, _ProviderIn] = Field(default_factory=dict)


def parse_price_table(text: str, source: str) -> PriceTable:
    """The built-in table with the overrides of the JSON document ``text``."""
    try:
        parsed = _TableIn.model_validate(json.loads(text))
    except json.JSONDecodeError as exc:
        raise PricingError(f"{source}: invalid JSON: {exc}") from None
    except ValidationError as exc:
        error = exc.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(part) for part in error["loc"]) or "document"
        raise PricingError(f"{source}: {where}: {error['msg']}") from None
    models = {**BUILTIN_MODELS, **{name: entry.price() for name, entry in parsed.models.items()}}
    return PriceTable(
        models,
        parsed.default.price() if parsed.default is not None else BUILTIN_DEFAULT,
        provider_models={
            provider.value: {name: entry.price() for name, entry in section.models.items()}
            for provider, section in parsed.providers.items()
        },
        provider_multipliers={
            provider.value: section.multiplier for provider, section in parsed.providers.items()
        },
        source=parsed.source or source,
    )


@functools.lru_cache(maxsize=8)
def load_price_table(path: Path | None) -> PriceTable:
    """The built-in table, or the built-in table overridden by the file at ``path`` (read once)."""
    if path is None:
        return DEFAULT_TABLE
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PricingError(f"{path}: {exc}") from None
    return parse_price_table(text, str(path))
