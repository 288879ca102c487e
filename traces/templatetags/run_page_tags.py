"""The run overview's long lists (`traces.runs.run_page`), drawn from the page's context: the turn
timeline's rows, the cognitive calls' rows, the fidelity map's groups and the pin lanes."""

from __future__ import annotations

from typing import Any

from django import template
from django.utils.safestring import SafeString

from traces.runs import run_page

register = template.Library()


@register.simple_tag(takes_context=True)
def timeline_rows(context: template.Context) -> SafeString:
    """The rows of `turns` (the context's run, its agent's timeline page)."""
    return run_page.timeline_rows_html(context["run"], context.get("turns") or [], context.get("agent") or "")


@register.simple_tag(takes_context=True)
def cognitive_rows(context: template.Context) -> SafeString:
    """The rows of `primitives`: (call, its one-line summary) each."""
    return run_page.cognitive_rows_html(context["run"], context.get("primitives") or [])


@register.simple_tag
def fidelity_groups(fmap: Any) -> SafeString:
    """The map's drawn groups: kept with a map the builder drew (`FidelityMap.drawn`), else drawn now."""
    drawn = getattr(fmap, "drawn", None)
    if isinstance(drawn, SafeString) and drawn:
        return drawn
    return run_page.fidelity_groups_html(fmap)


@register.simple_tag(takes_context=True)
def pin_lanes(context: template.Context) -> SafeString:
    """The pin chart's lanes (`pins`)."""
    return run_page.pin_lanes_svg_html(context["pins"])


@register.simple_tag(takes_context=True)
def pin_rows(context: template.Context) -> SafeString:
    """The pins table's rows (`pins`, linking `run`'s turns for `agent`)."""
    return run_page.pin_rows_html(context["run"], context["pins"], context.get("agent") or "")
