"""Token usage of one response and running totals, as immutable values.

``cost_usd`` is what the tokens cost, priced per response when it was received (``loop.cost``:
the gateway's price table, for the model the request went to); a sum of usages sums the costs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway.streaming.usage import Usage


@dataclass(frozen=True, slots=True)
class TokenUsage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cost_usd: float = 0.0
    """USD (``0.0`` when the response was not priced)."""

    @classmethod
    def from_reported(cls, reported: Usage, cost_usd: float = 0.0) -> TokenUsage:
        """Freeze the gateway's stream accumulator (fields present overwrite, as the SDK does)."""
        return cls(
            input_tokens=reported.input_tokens,
            output_tokens=reported.output_tokens,
            cache_read_input_tokens=reported.cache_read_input_tokens,
            cache_creation_input_tokens=reported.cache_creation_input_tokens,
            cost_usd=cost_usd,
        )

    @classmethod
    def from_dict(cls, reported: Mapping[str, Any]) -> TokenUsage:
        usage = Usage()
        usage.update(reported)
        return cls.from_reported(usage)

    @property
    def context_tokens(self) -> int:
        """Tokens the request's prompt occupied (uncached + cache read + cache write)."""
        return self.input_tokens + self.cache_read_input_tokens + self.cache_creation_input_tokens

    @property
    def billed(self) -> int:
        """What the token guardrail counts: uncached input + cache writes + output."""
        return self.input_tokens + self.cache_creation_input_tokens + self.output_tokens

    @property
    def total(self) -> int:
        """Every token the response was billed for, prompt and output."""
        return self.context_tokens + self.output_tokens

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_input_tokens=self.cache_read_input_tokens + other.cache_read_input_tokens,
            cache_creation_input_tokens=self.cache_creation_input_tokens + other.cache_creation_input_tokens,
            cost_usd=self.cost_usd + other.cost_usd,
        )

    def tokens(self) -> TokenUsage:
        """The same token counts without the cost (to compare counts alone)."""
        return TokenUsage(
            self.input_tokens,
            self.output_tokens,
            self.cache_read_input_tokens,
            self.cache_creation_input_tokens,
        )

    def as_dict(self) -> dict[str, int]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_input_tokens": self.cache_read_input_tokens,
            "cache_creation_input_tokens": self.cache_creation_input_tokens,
        }
