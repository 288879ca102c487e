"""The run overview's band of what filled the context (`composition.run_band`): its bars and its data
table's rows, drawn with `format_html` (`traces.runs.run_page.rows_html`, which escapes every value),
never marked safe; the markup is what templates/dashboard/_context_band.html's loops drew, byte for byte
(tests/traces/dashboard/test_band.py renders those loops as the reference). Through the template, the
band's ~120 steps of up to nine parts, and its table, were most of a long run's overview's render time.

`cached_run_band` keeps a finished run's band (the steps and their parts, not the markup) by the run's
state (`traces.core.runcache`); the markup is kept with the overview's other lists (run_page_tags).
"""

from __future__ import annotations

from typing import Any

from django.utils.safestring import SafeString

from traces.core.runcache import by_run_state
from traces.dashboard.composition import run_band
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


def cached_run_band(run: Any, agent: str) -> dict[str, Any] | None:
    """`run_band(run, agent)`, kept by the run's state (`traces.core.runcache`) with its agent and turn
    links, which the band's steps carry."""
    return by_run_state(
        f"band:{BAND_CACHE_VERSION}", run, (agent, run.turn_url(1)), lambda: run_band(run, agent)
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
