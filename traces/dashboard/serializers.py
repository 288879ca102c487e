"""The JSON shapes of the dashboard's API (plain dicts: the figures are `Figures.to_dict`)."""

from __future__ import annotations

from typing import Any

from runtime.pricing import Price


def price_dict(price: Price) -> dict[str, Any]:
    return price.to_dict()
