"""`runtime.pricing`: the default price table, model-name matching, cost arithmetic, and the tokens a
step's events say it used."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runtime._providers.presets import PRESETS  # noqa: PLC2701  (the presets' default models)
from runtime._trace import TraceEvent
from runtime.facts import build_steps, normalize_events
from runtime.pricing import (
    DEFAULT_PRICES,
    UNPRICED_PRESETS,
    Price,
    PriceTable,
    format_usd,
    normalize_model,
    step_usage,
)

OURS = Path(__file__).resolve().parents[1] / "fixtures" / "ours"


def test_every_preset_model_is_priced_or_says_why_not() -> None:
    for name, preset in PRESETS.items():
        assert (preset.model in DEFAULT_PRICES) != (preset.model in UNPRICED_PRESETS), name
    for model, price in DEFAULT_PRICES.items():
        assert price.as_of and price.source, model  # dated, with where it was read


def test_cost_per_million_with_cached_input_part_of_the_prompt() -> None:
    price = Price(input=2.0, output=8.0, cached_input=0.5)
    # 1M prompt tokens of which 400k cached, 100k completion tokens
    assert price.cost(1_000_000, 100_000, 400_000) == pytest.approx(
        600_000 * 2 / 1e6 + 400_000 * 0.5 / 1e6 + 0.8
    )
    # No cached price: cached tokens bill as input; cached never exceeds the prompt.
    assert Price(1.0, 1.0).cost(10, 0, 50) == pytest.approx(10 / 1e6)


def test_names_match_snapshots_and_router_prefixes_but_never_guess() -> None:
    table = PriceTable()
    assert normalize_model("openai/GPT-4o-mini-2024-07-18") == "gpt-4o-mini"
    assert table.price("gpt-4o-mini-2024-07-18") is DEFAULT_PRICES["gpt-4o-mini"]
    assert table.price("gemini-2.0-flash-001") is DEFAULT_PRICES["gemini-2.0-flash"]
    assert table.price("gpt-4o") is None  # a different model: no price, not gpt-4o-mini's
    assert table.price("scripted-1") is None
    assert table.cost("mock-gpt", 100, 100) is None


def test_overrides_win_and_unknown_models_are_counted_apart() -> None:
    table = PriceTable(overrides={"mock-gpt": Price(1.0, 2.0), "gpt-4o-mini": Price(0.0, 0.0)})
    assert table.cost("gpt-4o-mini", 10**6, 10**6) == 0.0
    summary = table.summarize([("mock-gpt", 10**6, 10**6, 0), ("other", 5, 7, 0), ("mock-gpt", 0, 0, 0)])
    assert summary.cost == pytest.approx(3.0)
    assert summary.unpriced_tokens == 12 and summary.unpriced_models == ["other"]
    data = summary.to_dict()
    assert data["cost_usd"] == pytest.approx(3.0)
    assert {m["model"]: m["cost_usd"] for m in data["models"]} == {"mock-gpt": 3.0, "other": None}
    assert PriceTable().summarize([("x", 1, 1, 0)]).to_dict()["cost_usd"] is None


def test_format_usd() -> None:
    assert [format_usd(v) for v in (None, 0, 1e-7, 0.000063, 0.0042, 0.123, 1234.5)] == [
        "not priced", "$0.00", "<$0.000001", "$0.000063", "$0.0042", "$0.123", "$1,234.50",
    ]  # fmt: skip


def test_step_usage_reads_the_turn_event_and_cached_tokens() -> None:
    path = sorted(OURS.glob("*.jsonl"))[0]
    events = [TraceEvent.from_dict(json.loads(line)) for line in path.read_text().splitlines() if line]
    steps = [sv for tv in build_steps(normalize_events(events)) for sv in tv.steps]
    usages = [step_usage(sv) for sv in steps]
    assert sum(u.prompt_tokens for u in usages) == 2329 and sum(u.completion_tokens for u in usages) == 120
    turn = next(sv.turn_event for sv in steps if sv.turn_event is not None)
    turn.metadata["facts"]["usage"] = {"prompt_tokens": 100, "completion_tokens": 5, "cached_tokens": 60}
    sv = next(sv for sv in steps if sv.turn_event is turn)
    assert step_usage(sv).cached_tokens == 60 and step_usage(sv).total_tokens == 105
