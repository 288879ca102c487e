"""The JSON shapes of the dashboard's API (plain dicts: the figures are `Figures.to_dict`), and the
price a caller sends to set one (`PriceInputSerializer`: strict, unknown fields refused)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from rest_framework import serializers

from runtime.pricing import Price
from traces.collab.notes import storable_text
from traces.models import ModelPrice

#: The fields a price body may hold (`model` only on the list route: the item route's path names it).
PRICE_FIELDS = ("input_per_million", "output_per_million", "cached_input_per_million")


def price_dict(price: Price) -> dict[str, Any]:
    return price.to_dict()


def _usd(value: Decimal | None) -> str | None:
    """A price as exact decimal text (`"0.15"`), as stored."""
    return None if value is None else format(Decimal(value).normalize(), "f")


def own_price_dict(row: ModelPrice) -> dict[str, Any]:
    """A project's own price of one model, as the write routes answer it."""
    return {
        "model": row.model,
        "input_per_million": _usd(row.input_per_million),
        "output_per_million": _usd(row.output_per_million),
        "cached_input_per_million": _usd(row.cached_input_per_million),
        "updated_at": row.updated_at.isoformat(),
        "updated_by": row.updated_by.get_username() if row.updated_by else None,
    }


class ModelNameField(serializers.CharField):
    """A model name as traces record it: a JSON string, 1–200 characters, no NUL or lone surrogate."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        if not storable_text(data):
            raise serializers.ValidationError("no NUL characters or lone surrogates")
        return str(super().to_internal_value(data))


def _price_field(**kw: Any) -> serializers.DecimalField:
    return serializers.DecimalField(
        max_digits=14, decimal_places=6, min_value=Decimal(0), coerce_to_string=False, **kw
    )


class PriceInputSerializer(serializers.Serializer[Any]):
    """USD per million tokens: `input_per_million` and `output_per_million` (numbers or decimal text,
    at least 0, at most 6 decimals), `cached_input_per_million` (null or left out: cached prompt tokens
    cost the input price)."""

    model = ModelNameField(max_length=200, help_text="the model name as traces record it")
    input_per_million = _price_field()
    output_per_million = _price_field()
    cached_input_per_million = _price_field(required=False, allow_null=True, default=None)

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            unknown = sorted(set(data) - {*self.fields})
            if unknown:
                raise serializers.ValidationError({k: "unknown field" for k in unknown[:10]})
            for name in ("input_per_million", "output_per_million", "cached_input_per_million"):
                if isinstance(data.get(name), bool):
                    raise serializers.ValidationError({name: "a number of US dollars, not true or false"})
        return super().to_internal_value(data)
