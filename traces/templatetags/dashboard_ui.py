"""Template filters and tags of the dashboard, cost and session pages (a step's context bar: `traces.dashboard.band`)."""

from __future__ import annotations

from typing import Any

from django import template
from django.utils.safestring import SafeString

from runtime.pricing import format_usd
from traces.dashboard import band

register = template.Library()


@register.filter
def usd(value: Any) -> str:
    """A cost in US dollars (`runtime.pricing.format_usd`); "not priced" for None."""
    return format_usd(None if value is None else float(value))


@register.filter
def ms(value: Any) -> str:
    """A latency: "850 ms", "12.4 s", "3.2 min"; "—" for None."""
    if value is None:
        return "—"
    v = float(value)
    if v < 1000:
        return f"{v:.0f} ms"
    if v < 60_000:
        return f"{v / 1000:.1f} s"
    return f"{v / 60_000:.1f} min"


@register.filter
def percent(value: Any) -> str:
    """0.125 → "12.5%"; "—" for None."""
    return band.percent_text(value)


@register.filter
def get_item(mapping: Any, key: Any) -> Any:
    """`mapping[key]` in a template (0 when missing)."""
    return mapping.get(key, 0) if isinstance(mapping, dict) else 0


@register.simple_tag
def composition_rects(comp: Any) -> SafeString:
    """A step's stacked bar of what filled its context (`traces.dashboard.band`)."""
    return band.composition_rects_html(comp)


@register.simple_tag
def composition_legend(comp: Any) -> SafeString:
    """The same parts as a list: label, tokens and share (`traces.dashboard.band`)."""
    return band.composition_legend_html(comp)
