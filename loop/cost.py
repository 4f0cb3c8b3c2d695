"""What a run's model calls cost, in USD: the gateway's price table applied to each response.

The table is ``gateway.pricing`` (the one behind ``gateway_cost_usd_total``; built-in prices, or
the ``GATEWAY_PRICING_FILE`` overrides: ``LoopDeps.prices``). Each response is priced when it is
received, for the model its request went to and the caller's upstream (``caller.provider.name``;
``anthropic`` when the caller does not say, e.g. the SDK caller), with its own cache-write TTL
split and long-context rate; the cost travels in ``TokenUsage.cost_usd`` wherever usage goes
(the run's totals, summarisation and hook-judge calls, sub-agents folded into their parent), and
``LoopConfig.max_cost_usd`` is checked against the run's total before every call.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gateway.pricing import DEFAULT_TABLE, PriceTable, cost_of
from gateway.streaming.usage import Usage
from loop.request import ModelRequest
from loop.stream import TurnAccumulator

FIRST_PARTY = "anthropic"


@dataclass(frozen=True, slots=True)
class Pricing:
    table: PriceTable = DEFAULT_TABLE
    provider: str = FIRST_PARTY

    @classmethod
    def for_caller(cls, table: PriceTable, caller: object) -> Pricing:
        """Prices of ``table`` on the caller's upstream."""
        name = getattr(getattr(caller, "provider", None), "name", None)
        return cls(table, name if isinstance(name, str) and name else FIRST_PARTY)

    def of(self, model: str) -> Callable[[Usage], float]:
        """What a response of ``model`` with a given usage costs."""
        price = self.table.price(self.provider, model)
        return lambda usage: cost_of(usage, price.rates_for(usage)).total

    def accumulator(self, request: ModelRequest) -> TurnAccumulator:
        """An accumulator for ``request``'s response whose usage is priced for its model."""
        model = request.body.get("model")
        return TurnAccumulator(price=self.of(model if isinstance(model, str) else ""))
