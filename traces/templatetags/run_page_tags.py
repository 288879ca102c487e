"""The run overview's long lists (`traces.runs.run_page`), drawn from the page's context: the turn
timeline's rows, the cognitive calls' rows, the fidelity map's groups, the pin lanes and the context
band's bars and rows (`traces.dashboard.band`).

An overview of a run that is not updating carries `overview_key` (`traces.runs.views._overview_parts`:
the run's primary key and `updated_at`, the agent and the windows); its drawn lists are cached under it
together with the page's turn links (a share link's own addresses) and whether the page is shared and
hides content, since `traces.collab.sharing.redact` changes what they show. Without `overview_key`
(a live run, its live fragment, the compare page) they are drawn every time.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from django import template
from django.core.cache import cache
from django.utils.safestring import SafeString

from traces.dashboard import band
from traces.runs import run_page

register = template.Library()

OVERVIEW_DRAWN_SECONDS = 3600


def _drawn(context: template.Context, name: str, draw: Callable[[], SafeString]) -> SafeString:
    """`draw()`, or what it drew for this overview (same run state, windows, links and sharing) before.
    The page's lists share one cache entry, so a view adds one entry whatever it shows."""
    overview_key = context.get("overview_key")
    if not overview_key:
        return draw()
    links = str(context["run"].turn_url(1))
    variant = f"{overview_key}:{links}:{bool(context.get('shared'))}:{bool(context.get('hide_content'))}"
    key = f"arcana:overview-drawn:{hashlib.sha256(variant.encode()).hexdigest()}"
    cached = cache.get(key)
    drawn: dict[str, SafeString] = cached if isinstance(cached, dict) else {}
    found = drawn.get(name)
    if isinstance(found, SafeString):  # only what format_html drew below
        return found
    drawn[name] = html = draw()
    cache.set(key, drawn, OVERVIEW_DRAWN_SECONDS)
    return html


@register.simple_tag(takes_context=True)
def timeline_rows(context: template.Context) -> SafeString:
    """The rows of `turns` (the context's run, its agent's timeline page)."""
    return _drawn(
        context,
        "timeline",
        lambda: run_page.timeline_rows_html(
            context["run"], context.get("turns") or [], context.get("agent") or ""
        ),
    )


@register.simple_tag(takes_context=True)
def cognitive_rows(context: template.Context) -> SafeString:
    """The rows of `primitives`: (call, its one-line summary) each."""
    return _drawn(
        context,
        "cognitive",
        lambda: run_page.cognitive_rows_html(context["run"], context.get("primitives") or []),
    )


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
    return _drawn(context, "pin_lanes", lambda: run_page.pin_lanes_svg_html(context["pins"]))


@register.simple_tag(takes_context=True)
def pin_rows(context: template.Context) -> SafeString:
    """The pins table's rows (`pins`, linking `run`'s turns for `agent`)."""
    return _drawn(
        context,
        "pin_rows",
        lambda: run_page.pin_rows_html(context["run"], context["pins"], context.get("agent") or ""),
    )


@register.simple_tag(takes_context=True)
def band_bars(context: template.Context) -> SafeString:
    """The context band's bars (`band`: `traces.dashboard.composition.run_band`)."""
    return _drawn(context, "band_bars", lambda: band.band_bars_html(context["band"]))


@register.simple_tag(takes_context=True)
def band_rows(context: template.Context) -> SafeString:
    """The context band's data table rows (`band`)."""
    return _drawn(context, "band_rows", lambda: band.band_rows_html(context["band"]))
