"""What filled the context, drawn: the run overview's band (`composition.run_band`: its bars and its data
table's rows) and a turn page step's bar and legend (`composition.Composition`), drawn with `format_html` (`traces.runs.run_page.rows_html`, which escapes every value),
never marked safe; the markup is what templates/dashboard/_context_band.html's loops drew, byte for
byte (tests/traces/dashboard/test_band.py renders those loops as the reference); the same for the loops
of templates/dashboard/_composition_bar.html. Through the template, the band's ~120 steps of up to nine
parts, and its table, were most of a long run's overview's render time.

The band is its own fragment (`GET …/runs/<run_id>/band`, `/s/<token>/band`), which the overview loads
after it is shown (`static/js/run.js`; a link to it without scripts): working out a long run's band is
most of what the overview's first view would cost. `fragment_html` keeps a finished run's drawn band by
the run's state (`traces.core.runcache`).
"""

from __future__ import annotations

from typing import Any

from django.template.loader import render_to_string
from django.utils.safestring import SafeString

from traces.core.runcache import by_run_state
from traces.dashboard.composition import Composition, run_band
from traces.runs.run_page import escaper, rows_html

#: Bumped when the cached band's shape changes, so a band of an older shape is not read.
BAND_CACHE_VERSION = 1

_RECT = (
    '<rect class="ctx-part-{}" x="{}" y="{}" width="{}" height="{}">'
    "<title>turn {} step {}: {} {} tokens</title></rect>"
)
_BAR = '<a href="{}" tabindex="-1">{}</a>'
_ROW_HEAD = '<tr><th scope="row"><a href="{}">turn {} · step {}</a></th>'
_CELL = '<td class="num">{}</td>'
_ROW_TAIL = '<td class="num">{}</td></tr>'


def fragment_html(run: Any, agent: str) -> str:
    """The band's section (dashboard/_context_band.html; "" when no step has a decision), kept by the
    run's state with its agent and turn links (a share link's page has its own)."""
    return by_run_state(
        f"band-html:{BAND_CACHE_VERSION}",
        run,
        (agent, run.turn_url(1)),
        lambda: render_to_string(
            "dashboard/_context_band.html", {"run": run, "agent": agent, "band": run_band(run, agent)}
        ),
    )


def band_bars_html(band: dict[str, Any]) -> SafeString:
    """The band's bars: per step a link holding its parts' rectangles, each with its title."""
    esc = escaper()
    bar = esc(band["bar"])
    steps = []
    for s in band["steps"]:
        x, turn, step = esc(s.x), esc(s.turn), esc(s.step)
        rects = [
            (esc(r["key"]), x, esc(r["y"]), bar, esc(r["h"]), turn, step, esc(r["label"]), esc(r["tokens"]))
            for r in s.rects
        ]
        steps.append((esc(s.href), rows_html(_RECT, rects)))
    return rows_html(_BAR, steps)


def band_rows_html(band: dict[str, Any]) -> SafeString:
    """The data table's rows: per step its link, its tokens by part (the band's parts) and its total."""
    esc = escaper()
    keys = [key for key, _label in band["parts"]]
    rows = []
    for s in band["steps"]:
        tokens = s.comp.tokens
        got = tokens.get if isinstance(tokens, dict) else None
        cells = [esc(got(k, 0) if got else 0) for k in keys]
        rows.append((esc(s.href), esc(s.turn), esc(s.step), *cells, esc(s.comp.total)))
    return rows_html(_ROW_HEAD + _CELL * len(keys) + _ROW_TAIL, rows)


_SEGMENT = '<rect class="ctx-part-{}" x="{}" y="0" width="{}" height="6"><title>{}: {} tokens</title></rect>'
_LEGEND = (
    '<li><span class="legend__swatch ctx-part-{}" aria-hidden="true"></span> {} {} '
    '<span class="muted">({})</span></li>'
)


def percent_text(value: Any) -> str:
    """0.125 → "12.5%"; "—" for None (the `percent` filter of templatetags/dashboard_ui.py)."""
    return "—" if value is None else f"{float(value) * 100:.1f}%"


def composition_rects_html(comp: Composition) -> SafeString:
    """A step's stacked bar: a rectangle per part with tokens, with its title."""
    esc = escaper()
    return rows_html(
        _SEGMENT,
        [
            (esc(s["key"]), esc(s["x"]), esc(s["width"]), esc(s["label"]), esc(s["tokens"]))
            for s in comp.segments()
        ],
    )


def composition_legend_html(comp: Composition) -> SafeString:
    """The bar's parts as list items: label, tokens and share (`dashboard_ui.percent`'s wording)."""
    esc = escaper()
    return rows_html(
        _LEGEND,
        [
            (esc(s["key"]), esc(s["label"]), esc(s["tokens"]), esc(percent_text(s["share"])))
            for s in comp.segments()
        ],
    )
