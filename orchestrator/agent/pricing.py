"""Dollar prices of Anthropic models, per million tokens, and the cost of a `Usage`.

Prices follow Anthropic's public list (5-minute cache writes at 1.25 x input,
cache reads at 0.1 x input). A model name we do not know is priced as its
family (``opus``, ``haiku``, else ``sonnet``) so budgets still hold.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from orchestrator.model import Usage

PER_MILLION = 1_000_000


@dataclass(frozen=True)
class Price:
    input: float
    output: float

    @property
    def cache_write(self) -> float:
        return self.input * 1.25

    @property
    def cache_read(self) -> float:
        return self.input * 0.1


PRICES: dict[str, Price] = {
    "claude-opus-4-5": Price(5.0, 25.0),
    "claude-opus-4-1": Price(15.0, 75.0),
    "claude-opus-4": Price(15.0, 75.0),
    "claude-sonnet-4-5": Price(3.0, 15.0),
    "claude-sonnet-4": Price(3.0, 15.0),
    "claude-3-7-sonnet": Price(3.0, 15.0),
    "claude-haiku-4-5": Price(1.0, 5.0),
    "claude-3-5-haiku": Price(0.8, 4.0),
}
FAMILY = {"opus": PRICES["claude-opus-4-1"], "haiku": PRICES["claude-haiku-4-5"],
          "sonnet": PRICES["claude-sonnet-4-5"]}


def price_of(model: str) -> Price:
    """The longest listed name that ``model`` starts with (dated ids match), else its family."""
    for name in sorted(PRICES, key=len, reverse=True):
        if model.startswith(name):
            return PRICES[name]
    for family, price in FAMILY.items():
        if family in model:
            return price
    return FAMILY["sonnet"]


def cost_usd(model: str, usage: Usage) -> float:
    p = price_of(model)
    return (usage.input_tokens * p.input + usage.output_tokens * p.output
            + usage.cache_write_tokens * p.cache_write
            + usage.cache_read_tokens * p.cache_read) / PER_MILLION


def priced(model: str, usage: Usage) -> Usage:
    """``usage`` with its ``cost_usd`` filled in."""
    return msgspec.structs.replace(usage, cost_usd=cost_usd(model, usage))
