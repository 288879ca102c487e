"""The run overview's long lists, written in Python: the turn timeline's rows, the cognitive calls' rows,
the fidelity map's drawn groups (labels, ticks, separators, cells) and the pin lanes (bars and rows).

Why not the template: the overview of a long run draws 200 timeline rows, up to 100 cognitive calls
and a map window of a thousand rectangles or more; through the template each of their ~15,000 values
cost a variable lookup, localization and an escape call (most of the page's server time). These
functions write the markup the templates wrote, byte for byte (tests/traces/test_run_page.py renders
the replaced template loops as the reference, on hostile values): every value printed is escaped as
the template's auto-escaping does (`text`), every filter is the template's own filter function.

They draw from what the template would have received (the view's context, after
`traces.collab.sharing.redact` for a shared page), so a shared page's links and hidden content come out as
before. Turn links are built from one `Run.turn_url` call (`turn_link`), not one `reverse()` a row.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.template.defaultfilters import add, date, pluralize, truncatechars, urlencode
from django.utils.formats import localize
from django.utils.safestring import SafeString, mark_safe
from django.utils.timezone import template_localtime  # type: ignore[attr-defined]  # (not in the stubs)

from traces.templatetags.trace_ui import pct, pct_class, tokens, util_level

if TYPE_CHECKING:
    from traces.models import PrimitiveEvent, Run, Turn
    from traces.runs.charts import FidelityMap, PinChart

_escape = html.escape
#: Whether a text holds a character `html.escape` replaces (most values hold none: one scan, no copy).
_MARKUP = re.compile("[&<>\"']").search

DASH = "—"
PIN_CLASS = ' class="pin"'


def text(value: Any) -> str:
    """`value` as the template's `{{ value }}` prints it with auto-escaping: localized, `str()`, then
    HTML-escaped (`& < > " '`) unless it is already safe markup (which no trace value is)."""
    if type(value) is str:
        return _escape(value) if _MARKUP(value) else value
    if type(value) is int:  # what localize gives an int without thousand separators
        return str(value)
    if value is None:
        return "None"
    value = localize(value)
    if hasattr(value, "__html__"):
        return str(value.__html__())
    return _escape(str(value))


def _date(value: Any, fmt: str) -> str:
    """`{{ value|date:fmt }}`: the filter sees the value in the current time zone, as in a template."""
    return text(date(template_localtime(value), fmt))


def _time_pair(value: Any) -> tuple[str, str]:
    """`{{ value|date:'c' }}` and `{{ value|date:"H:i:s" }}`. For a datetime, Django's "c" is
    `isoformat()` and "H:i:s" two-digit hours, minutes and seconds: written here directly (the filter
    parses its format on every call, 1,000 times a page); anything else goes through the filter."""
    local = template_localtime(value)
    if type(local) is datetime:
        return local.isoformat(), f"{local.hour:02d}:{local.minute:02d}:{local.second:02d}"
    return _date(value, "c"), _date(value, "H:i:s")


def turn_link(run: Run) -> Callable[[int], str]:
    """`number → run.turn_url(number)`, from one call of `run.turn_url` (which a share link binds to
    its own addresses): the address with the number swapped, checked against a second real call, or
    `run.turn_url` itself when the address does not end in the number."""
    probe = 987654321
    url = str(run.turn_url(probe))
    head, sep, tail = url.rpartition(str(probe))
    if sep and str(run.turn_url(1)) == f"{head}1{tail}":
        return lambda number: f"{head}{int(number)}{tail}"
    return lambda number: str(run.turn_url(int(number)))


# ---------------------------------------------------------------------------------------------------
# The turn timeline (templates/traces/_run_live.html)


def timeline_rows_html(run: Run, turns: Iterable[Turn], agent: str) -> SafeString:
    """The timeline's `<tr>` rows, one a turn."""
    link = turn_link(run)
    agent_q = f"?agent={text(urlencode(agent))}" if agent else ""
    out: list[str] = []
    add_row = out.append
    for t in turns:
        failure = t.failure
        failed = f' <span class="badge badge--bad" title="{text(failure)}">failed</span>' if failure else ""
        peak = t.peak_utilization
        if peak is not None:
            util = (
                "\n        "
                f'<span class="util"><span class="util__bar"><span class="util__fill util__fill--'
                f'{text(util_level(peak))} {text(pct_class(peak))}"></span></span>'
                f'<span class="util__label">{text(pct(peak))}</span></span>'
                "\n        "
            )
        else:
            util = f'<span class="muted">{DASH}</span>'
        prims = (
            f'<span class="prim-count">{text(t.primitives)}</span>'
            if t.primitives
            else f'<span class="muted">{DASH}</span>'
        )
        errors = t.errors
        errs = (
            f' <span class="bad" title="{text(errors)} error{text(pluralize(errors))}">✗{text(errors)}</span>'
            if errors
            else ""
        )
        started = t.started_at
        when = '<time datetime="{}">{}</time>'.format(*_time_pair(started)) if started else ""
        add_row(
            "\n    <tr>\n"
            f'      <th scope="row"><a href="{text(link(t.number))}{agent_q}">Turn {text(t.number)}</a>{failed}</th>\n'
            f'      <td class="num">{text(t.steps)}</td>\n'
            f'      <td class="num" title="{text(t.prompt_tokens)} prompt + {text(t.completion_tokens)} completion">'
            f"{text(tokens(t.tokens))}</td>\n"
            f"      <td>\n        {util}\n      </td>\n"
            f'      <td class="hide-sm"><span class="strategy">{text(t.strategy or DASH)}</span></td>\n'
            f'      <td class="num hide-sm">{text(t.compressions or DASH)}</td>\n'
            f"      <td>{prims}</td>\n"
            f'      <td class="num hide-sm">{text(t.tool_calls or DASH)}{errs}</td>\n'
            f'      <td class="num hide-sm muted">{when}</td>\n'
            "    </tr>\n    "
        )
    return mark_safe("".join(out))  # noqa: S308 (every value above went through text)


# ---------------------------------------------------------------------------------------------------
# The cognitive calls (templates/traces/_cognitive.html)


def cognitive_rows_html(run: Run, primitives: Sequence[tuple[PrimitiveEvent, str]]) -> SafeString:
    """The cognitive calls' `<tr>` rows: (call, its one-line summary) each."""
    link = turn_link(run)
    with_agents = bool(run.agents)
    out: list[str] = []
    add_row = out.append
    for n, (ev, line) in enumerate(primitives, 1):
        agent_cell = f"<td>{text(ev.agent or DASH)}</td>" if with_agents else ""
        turn = ev.turn_number
        if turn:
            agent_q = f"?agent={text(urlencode(ev.agent))}" if ev.agent else ""
            step = ev.step_number
            where = (
                f'<a href="{text(link(turn))}{agent_q}#step-{text(step or 1)}">turn {text(turn)}'
                f"{f'.{text(step)}' if step else ''}</a>"
            )
        else:
            where = f'<span class="muted">{DASH}</span>'
        no_effect = "" if ev.ok else '<span class="badge badge--warn">no effect</span>'
        primitive = text(ev.primitive)
        iso, clock = _time_pair(ev.timestamp)
        add_row(
            "\n  <tr>\n"
            f'    <td class="num muted">{n}</td>\n'
            f'    <td class="nowrap mono small"><time datetime="{iso}">{clock}</time></td>\n'
            f"    {agent_cell}\n"
            f'    <td class="nowrap">{where}</td>\n'
            f'    <td><span class="prim prim--{primitive}">{primitive}</span></td>\n'
            f'    <td class="preview"><span class="mono small">{text(line)}</span> {no_effect}</td>\n'
            "  </tr>\n  "
        )
    return mark_safe("".join(out))  # noqa: S308 (every value above went through text)


# ---------------------------------------------------------------------------------------------------
# The fidelity map (templates/traces/_fidelity_map.html)


def fidelity_groups_html(fmap: FidelityMap) -> SafeString:
    """The map's four `<g>` groups: turn separators, turn ticks, row labels, cells."""
    top, height, label_x, cell_h = (
        text(add(fmap.top, -4)),
        text(fmap.height),
        text(fmap.label_x),
        text(fmap.cell_h),
    )
    seps = "".join(f'<line x1="{text(x)}" y1="{top}" x2="{text(x)}" y2="{height}"/>' for x in fmap.separators)
    ticks = "".join(
        f'<a href="{text(t.url)}"><text x="{text(t.x)}" y="14">{text(t.label)}</text></a>' for t in fmap.ticks
    )
    labels = "".join(
        f'<text x="{label_x}" y="{text(r.y)}"{PIN_CLASS if r.is_pin else ""}>{text(r.label)}</text>'
        for r in fmap.rows
        if r.label
    )
    cells = "".join(
        f'<rect class="fcell f-{text(c.cls)}" x="{text(c.x)}" y="{text(c.y)}" width="{text(c.w)}" '
        f'height="{cell_h}"><title>{text(c.title)}</title></rect>'
        for c in fmap.cells
    )
    return mark_safe(  # noqa: S308 (every value above went through text)
        f'<g class="fmap-seps">{seps}</g>\n  <g class="fmap-ticks">{ticks}</g>\n'
        f'  <g class="fmap-labels">{labels}</g>\n  <g class="fmap-cells">{cells}</g>'
    )


# ---------------------------------------------------------------------------------------------------
# The pin lanes (templates/traces/_pin_lanes.html)


def pin_lanes_svg_html(pins: PinChart) -> SafeString:
    """The chart's lanes: one `<g>` a pin, its label, bar (with its hover text) and tokens."""
    label_x = text(pins.label_x)
    out: list[str] = []
    for lane in pins.lanes:
        pin = lane.pin
        text_y = text(lane.text_y)
        out.append(
            f'\n  <g class="pin-lane pin-lane--{text(lane.ended_by)}">\n'
            f'    <text class="lane-label" x="{label_x}" y="{text_y}">'
            f"{text(truncatechars(pin.label or pin.pin_id, 26))}</text>\n"
            f'    <rect x="{text(lane.x)}" y="{text(lane.bar_y)}" width="{text(lane.w)}" height="16" rx="3">'
            f"<title>{text(lane.title)}</title></rect>\n"
            f'    <text class="lane-tokens" x="{text(lane.text_x)}" y="{text_y}">{text(pin.tokens or "?")} tok</text>\n'
            "  </g>\n  "
        )
    return mark_safe("".join(out))  # noqa: S308 (every value above went through text)


def pin_rows_html(run: Run, pins: PinChart, agent: str) -> SafeString:
    """The pins table's rows: one a lane, with the link to the turn the pin was made in."""
    link = turn_link(run)
    agent_q = f"?agent={text(urlencode(agent))}" if agent else ""
    out: list[str] = []
    for lane in pins.lanes:
        pin = lane.pin
        until = (
            f"turn {text(pin.until_turn)}"
            if pin.until_turn is not None
            else '<span class="muted">no expiry</span>'
        )
        if lane.ended_by == "unpinned":
            ended = f"unpinned at turn {text(lane.end_turn)}"
        elif lane.ended_by == "expired":
            ended = f"expired after turn {text(lane.end_turn)}"
        else:
            ended = '<span class="badge badge--accent">active at end</span>'
        out.append(
            "\n  <tr>\n"
            f'    <td class="mono">{text(pin.pin_id)}</td>\n'
            f'    <td class="preview">{text(pin.label or DASH)}</td>\n'
            f'    <td class="num">{text(pin.tokens or "?")}</td>\n'
            f'    <td><a href="{text(link(pin.created_turn))}{agent_q}">turn {text(pin.created_turn)}</a></td>\n'
            f"    <td>{until}</td>\n"
            f"    <td>{ended}</td>\n"
            "  </tr>\n  "
        )
    return mark_safe("".join(out))  # noqa: S308 (every value above went through text)
