"""The project price form (USD per million tokens)."""

from __future__ import annotations

from decimal import Decimal

from django import forms


class PriceForm(forms.Form):
    model = forms.CharField(max_length=200, help_text="the model name as traces record it")
    input_per_million = forms.DecimalField(
        label="Input, USD per million tokens", min_value=Decimal(0), max_digits=14, decimal_places=6
    )
    output_per_million = forms.DecimalField(
        label="Output, USD per million tokens", min_value=Decimal(0), max_digits=14, decimal_places=6
    )
    cached_input_per_million = forms.DecimalField(
        label="Cached input, USD per million tokens",
        required=False,
        help_text="empty: cached prompt tokens cost the input price",
        min_value=Decimal(0),
        max_digits=14,
        decimal_places=6,
    )

    def clean_model(self) -> str:
        model = self.cleaned_data["model"].strip()
        if not model:
            raise forms.ValidationError("name the model")
        return model
