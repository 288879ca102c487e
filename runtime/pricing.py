"""What a model call cost: a price table per model, and the tokens of a step read from its events.

Pure Python, shared by the CLI (`arcana trace show` prints a run's cost) and the server (the pages,
the read API and the dashboard's rollups price steps with a project's table: these defaults, with the
project's own prices over them, `traces/dashboard/prices.py`).

Prices are US dollars per million tokens: `input` (prompt tokens not read from a prompt cache),
`output` (completion tokens) and `cached_input` (prompt tokens read from a cache; None when the
provider bills them as input). A cached token is part of the prompt tokens, as every provider counts
it, so a call costs

    (prompt - cached) x input + cached x cached_input + completion x output   (per million)

`DEFAULT_PRICES` holds the default models of the provider presets (`runtime/_providers/presets.py`)
whose vendors publish a dollar price, each with the date it took effect and where it was read. They
age: a team checks them and sets its own per project. A model that is not in the table has NO price:
its tokens are shown and its cost is "not priced", never a guess (`UNPRICED_PRESETS` says why two
presets' models have none).

    >>> table = PriceTable()
    >>> round(table.cost("gpt-4o-mini-2024-07-18", 1_000_000, 1_000_000), 4)
    0.75
    >>> table.cost("my-own-model", 10, 10) is None
    True
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from .facts import StepView, as_dict, as_int

__all__ = [
    "DEFAULT_PRICES",
    "PRICES_CHECKED",
    "UNPRICED_PRESETS",
    "CostSummary",
    "Price",
    "PriceTable",
    "Usage",
    "format_usd",
    "normalize_model",
    "step_usage",
]

#: The day these defaults were last checked against the sources they name.
PRICES_CHECKED = "2026-12-04"


@dataclass(frozen=True)
class Price:
    """A model's price in USD per million tokens; `as_of`: the date the price took effect (ISO),
    `source`: where it was read ("" for a project's own price)."""

    input: float
    output: float
    cached_input: float | None = None
    as_of: str = ""
    source: str = ""

    def cost(self, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> float:
        """USD for one call (or a sum of calls) of this model. `cached_tokens` is the part of
        `prompt_tokens` read from a prompt cache (clamped to it)."""
        prompt = max(int(prompt_tokens or 0), 0)
        cached = min(max(int(cached_tokens or 0), 0), prompt)
        cached_rate = self.input if self.cached_input is None else self.cached_input
        total = (
            (prompt - cached) * self.input
            + cached * cached_rate
            + max(int(completion_tokens or 0), 0) * self.output
        )
        return total / 1_000_000

    def to_dict(self) -> dict[str, Any]:
        return {
            "input": self.input,
            "output": self.output,
            "cached_input": self.cached_input,
            "as_of": self.as_of,
            "source": self.source,
        }


#: Default prices of the presets' default models (USD per million tokens).
DEFAULT_PRICES: Mapping[str, Price] = {
    # OpenAI's launch price of gpt-4o-mini, unchanged since; cached input at half price.
    "gpt-4o-mini": Price(0.15, 0.60, 0.075, "2024-07-18", "https://platform.openai.com/docs/pricing"),
    # Google AI Studio / Gemini API, paid tier, text input; context-cache reads at a quarter.
    "gemini-2.0-flash": Price(
        0.10, 0.40, 0.025, "2025-02-05", "https://ai.google.dev/gemini-api/docs/pricing"
    ),
    # DeepSeek's standard (not off-peak) USD table for deepseek-chat (DeepSeek-V3): cache miss,
    # output, cache hit. DeepSeek has changed these since; check its page.
    "deepseek-chat": Price(
        0.27, 1.10, 0.07, "2025-02-09", "https://api-docs.deepseek.com/quick_start/pricing-details-usd"
    ),
    # Zhipu made GLM-4-Flash free of charge.
    "glm-4-flash": Price(0.0, 0.0, 0.0, "2024-08-27", "https://open.bigmodel.cn/pricing"),
    # The Ollama preset runs the model on your own machine: no per-token price.
    "llama3.2": Price(0.0, 0.0, 0.0, PRICES_CHECKED, "local (Ollama): no per-token price"),
}

#: Preset models without a default price, and why (a project can price them itself).
UNPRICED_PRESETS: Mapping[str, str] = {
    "moonshot-v1-8k": "Moonshot prices it in yuan (CNY); no dollar price is published to take",
    "abab6.5s-chat": "MiniMax prices it in yuan (CNY); no dollar price is published to take",
}

_DATE_SUFFIX = re.compile(r"-(?:\d{4}-\d{2}-\d{2}|\d{8}|\d{3})$")


def normalize_model(name: str) -> str:
    """The key a model name is priced under: lower case, without a router's `provider/` prefix
    (`openai/gpt-4o-mini`) and without a dated or numbered snapshot suffix (`-2024-07-18`,
    `-20240718`, `-001`), which names the same model at the same price."""
    key = (name or "").strip().lower()
    if "/" in key:
        key = key.rsplit("/", 1)[1]
    return _DATE_SUFFIX.sub("", key)


class PriceTable:
    """Prices by model: `defaults` (normally `DEFAULT_PRICES`) with `overrides` over them (a
    project's own prices). Lookups try the name as written, then its `normalize_model` key."""

    def __init__(
        self, defaults: Mapping[str, Price] = DEFAULT_PRICES, overrides: Mapping[str, Price] | None = None
    ) -> None:
        self.defaults = dict(defaults)
        self.overrides = dict(overrides or {})
        self._by_key: dict[str, Price] = {}
        for source in (self.defaults, self.overrides):  # overrides last: they win
            for model, price in source.items():
                self._by_key[model] = price
                self._by_key.setdefault(normalize_model(model), price)
        for model, price in self.overrides.items():
            self._by_key[normalize_model(model)] = price

    def price(self, model: str | None) -> Price | None:
        if not model:
            return None
        found = self._by_key.get(model)
        return found if found is not None else self._by_key.get(normalize_model(model))

    def cost(self, model: str | None, prompt: int, completion: int, cached: int = 0) -> float | None:
        """USD, or None when the model has no price."""
        price = self.price(model)
        return None if price is None else price.cost(prompt, completion, cached)

    def summarize(self, rows: Iterable[tuple[str | None, int, int, int]]) -> CostSummary:
        """The cost of `(model, prompt, completion, cached)` rows (steps, or sums per model)."""
        out = CostSummary()
        for model, prompt, completion, cached in rows:
            out.add(self, model or "", int(prompt or 0), int(completion or 0), int(cached or 0))
        return out


@dataclass
class ModelCost:
    """Tokens and cost of one model within a `CostSummary` (`cost` None: not priced)."""

    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cost: float | None = None

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass
class CostSummary:
    """The cost of some calls: `cost` sums the priced ones; `unpriced_tokens` counts the tokens of
    models without a price (`unpriced_models`), which add nothing to `cost`."""

    cost: float = 0.0
    priced_tokens: int = 0
    unpriced_tokens: int = 0
    by_model: dict[str, ModelCost] = field(default_factory=dict)

    def add(self, table: PriceTable, model: str, prompt: int, completion: int, cached: int = 0) -> None:
        entry = self.by_model.setdefault(model, ModelCost(model))
        entry.prompt_tokens += prompt
        entry.completion_tokens += completion
        entry.cached_tokens += cached
        cost = table.cost(model, prompt, completion, cached)
        if cost is None:
            self.unpriced_tokens += prompt + completion
        else:
            entry.cost = (entry.cost or 0.0) + cost
            self.cost += cost
            self.priced_tokens += prompt + completion

    @property
    def unpriced_models(self) -> list[str]:
        return sorted(m for m, e in self.by_model.items() if e.cost is None and e.tokens)

    @property
    def any_priced(self) -> bool:
        return any(e.cost is not None for e in self.by_model.values())

    def to_dict(self) -> dict[str, Any]:
        """The API's and `show --json`'s shape: `cost_usd` is None when nothing was priced."""
        return {
            "cost_usd": round(self.cost, 8) if self.any_priced else None,
            "priced_tokens": self.priced_tokens,
            "unpriced_tokens": self.unpriced_tokens,
            "unpriced_models": self.unpriced_models,
            "models": [
                {
                    "model": e.model,
                    "prompt_tokens": e.prompt_tokens,
                    "completion_tokens": e.completion_tokens,
                    "cached_tokens": e.cached_tokens,
                    "cost_usd": None if e.cost is None else round(e.cost, 8),
                }
                for e in sorted(self.by_model.values(), key=lambda e: e.model)
            ],
        }


class Usage(NamedTuple):
    """The tokens of one step (one model call). A named tuple: the server makes one per projected step
    (made in a third of a frozen dataclass's time)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cached_tokens: int = 0


_NO_USAGE = Usage()


def _tokens(u: dict[str, Any], key: str) -> int:
    """`as_int(u[key]) or 0`, a plain int first (what nearly every producer writes)."""
    v = u.get(key)
    return v if type(v) is int else (as_int(v) or 0)


def _usage(value: Any) -> Usage:
    if not isinstance(value, dict) or not value:
        return _NO_USAGE
    prompt = _tokens(value, "prompt_tokens")
    completion = _tokens(value, "completion_tokens")
    total = _tokens(value, "total_tokens") or (prompt + completion)
    cached = 0
    if "cached_tokens" in value or "cache_read_input_tokens" in value or "prompt_tokens_details" in value:
        details = as_dict(value.get("prompt_tokens_details"))
        cached = (
            as_int(value.get("cached_tokens"))
            or as_int(value.get("cache_read_input_tokens"))
            or as_int(details.get("cached_tokens"))
            or 0
        )
    return Usage(prompt, completion, total, min(max(cached, 0), prompt))


def step_usage(sv: StepView) -> Usage:
    """The tokens a step's model call used, as the server's projection reads them: the `turn`
    event's `facts.usage`, else the sum over the step's own chat `llm_call`s (not summarizer calls).
    `cached_tokens`: `cached_tokens` / `cache_read_input_tokens` / `prompt_tokens_details.cached_tokens`."""
    te = sv.turn_event
    if te is not None:
        facts = te.metadata.get("facts")
        if isinstance(facts, dict) and (usage := facts.get("usage")):
            return _usage(usage)
    out = _NO_USAGE
    for ev in sv.llm_calls:
        if ev.metadata.get("purpose") == "summarize" or not ev.is_ours:
            continue
        u = _usage(ev.metadata.get("usage"))
        out = Usage(
            out.prompt_tokens + u.prompt_tokens,
            out.completion_tokens + u.completion_tokens,
            out.total_tokens + u.total_tokens,
            out.cached_tokens + u.cached_tokens,
        )
    return out


def format_usd(value: float | None) -> str:
    """`$1,234.50`, `$0.123`, `$0.0012`, `$0.000063`, `<$0.000001`; "not priced" for None."""
    if value is None:
        return "not priced"
    if value == 0:
        return "$0.00"
    if value < 0.000001:
        return "<$0.000001"
    if value < 0.0001:
        return f"${value:.6f}"
    if value < 0.01:
        return f"${value:.4f}"
    if value < 1:
        return f"${value:.3f}"
    return f"${value:,.2f}"
