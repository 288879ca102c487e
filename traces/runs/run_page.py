"""The run overview's long lists: the turn timeline's rows, the cognitive calls' rows, the fidelity
map's drawn groups (labels, ticks, separators, cells) and the pin lanes (bars and rows).

They are drawn with `format_html` (`rows_html`), which escapes every value it prints: no trace string
is ever marked safe here. Why not the template: the overview of a long run draws 200
timeline rows, up to 100 cognitive calls and a map window of a thousand rectangles or more; through the
template each of their ~15,000 values cost a variable lookup and a node's render (most of the page's
server time). The markup is the templates' byte for byte (tests/traces/runs/test_run_page.py renders the
replaced template loops as the reference, on hostile values): every value is printed as the template's
`{{ value }}` prints it (`escaper`: localized, then escaped), every filter is the template's own.

They draw from what the template would have received (the view's context, after
`traces.collab.sharing.redact` for a shared page), so a shared page's links and hidden content come out as
before. Turn links are built from one `Run.turn_url` call (`turn_link`), not one `reverse()` a row.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from itertools import chain
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.template.defaultfilters import add, date, pluralize, truncatechars, urlencode
from django.utils.formats import get_format, localize
from django.utils.html import conditional_escape, format_html
from django.utils.safestring import SafeString
from django.utils.timezone import template_localtime  # type: ignore[attr-defined]  # (not in the stubs)
from django.utils.translation import get_language

from traces.templatetags.trace_ui import pct, pct_class, tokens, util_level

if TYPE_CHECKING:
    from traces.models import PrimitiveEvent, Run, Turn
    from traces.runs.charts import FidelityMap, PinChart

DASH = "—"

#: Fixed bits of markup the rows insert, drawn once (by `format_html`, like every other piece).
MUTED_DASH = format_html('<span class="muted">{}</span>', DASH)
NO_EFFECT = format_html('<span class="badge badge--warn">{}</span>', "no effect")
NO_EXPIRY = format_html('<span class="muted">{}</span>', "no expiry")
ACTIVE_AT_END = format_html('<span class="badge badge--accent">{}</span>', "active at end")
PIN_CLASS = format_html(' class="{}"', "pin")

Escaper = Callable[[Any], SafeString]

#: Nothing, as markup (what a list of no rows draws).
EMPTY = format_html("{}", "")


def rows_html(row_format: str, rows: Sequence[Sequence[Any]]) -> SafeString:
    """`format_html_join("", row_format, rows)` in one `format_html` call: the format is the row's
    constant markup repeated once a row (it holds no value), and every value is an argument, escaped by
    `format_html` unless it is already markup drawn by `format_html`. One call instead of one a row
    halves the cost of a long list."""
    if not rows:
        return EMPTY
    return format_html(row_format * len(rows), *chain.from_iterable(rows))


#: Non-negative ints below this are drawn once a process (`small_int`): a decision table prints each
#: message's index and token counts, a different value on every row of a step.
SMALL_INTS = 1 << 17
_SMALL_INTS: dict[int, SafeString] = {}


def small_int(value: int) -> SafeString:
    """A non-negative int below `SMALL_INTS`, as the template's `{{ value }}` prints it: escaped once a
    process (an int's text never changes), so a long table pays a dictionary lookup, not an escape."""
    found = _SMALL_INTS.get(value)
    if found is None:
        found = _SMALL_INTS[value] = conditional_escape(str(value))
    return found


def escaper() -> Escaper:
    """A function printing a value as the template's `{{ value }}` does with auto-escaping: localized,
    then `conditional_escape`d (HTML-escaped unless it is already safe markup, which no trace value
    is). It remembers what it printed for each string and int: a long list repeats its roles, outcomes,
    reasons and small counts hundreds of times, and `format_html` passes an escaped value through as is."""
    memo: dict[Any, SafeString] = {}
    get = memo.get
    # A float prints as `str(value)` when localizing changes nothing (a "." separator, no thousands
    # grouping) and Python writes it without an exponent (`localize` writes those as decimals): the
    # charts print a thousand coordinates a page, each a trip through `number_format` otherwise.
    plain_floats = (
        not settings.USE_THOUSAND_SEPARATOR
        and get_format("DECIMAL_SEPARATOR", get_language(), use_l10n=True) == "."
    )

    def esc(value: Any) -> SafeString:
        kind = type(value)
        if kind is int and 0 <= value < SMALL_INTS:
            return small_int(value)
        if kind is float and plain_floats:
            text = repr(value)
            if "e" not in text and "n" not in text:  # not 1e-05, inf or nan
                value, kind = text, str  # printed as the string it localizes to
        if kind is str or kind is int:  # never a bool or a float: True == 1 == 1.0 as dict keys
            found = get(value)
            if found is None:
                found = memo[value] = conditional_escape(value)
            return found
        return conditional_escape(localize(value))

    return esc


def _date(value: Any, fmt: str) -> str:
    """`{{ value|date:fmt }}` before escaping: the filter sees the value in the current time zone."""
    return date(template_localtime(value), fmt)


def _time_pair(value: Any) -> tuple[str, str]:
    """`{{ value|date:'c' }}` and `{{ value|date:"H:i:s" }}` before escaping. For a datetime, Django's
    "c" is `isoformat()` and "H:i:s" two-digit hours, minutes and seconds: written here directly (the
    filter parses its format on every call, 1,000 times a page); anything else goes through the filter."""
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

_TIMELINE_ROW = (
    "\n    <tr>\n"
    '      <th scope="row"><a href="{}">Turn {}</a>{}</th>\n'
    '      <td class="num">{}</td>\n'
    '      <td class="num" title="{} prompt + {} completion">{}</td>\n'
    "      <td>\n        {}\n      </td>\n"
    '      <td class="hide-sm"><span class="strategy">{}</span></td>\n'
    '      <td class="num hide-sm">{}</td>\n'
    "      <td>{}</td>\n"
    '      <td class="num hide-sm">{}{}</td>\n'
    '      <td class="num hide-sm muted">{}</td>\n'
    "    </tr>\n    "
)
_UTIL = (
    "\n        "
    '<span class="util"><span class="util__bar"><span class="util__fill util__fill--{} {}"></span></span>'
    '<span class="util__label">{}</span></span>'
    "\n        "
)


def timeline_rows_html(run: Run, turns: Iterable[Turn], agent: str) -> SafeString:
    """The timeline's `<tr>` rows, one a turn."""
    return rows_html(_TIMELINE_ROW, list(_timeline_cells(run, turns, agent)))


def _timeline_cells(run: Run, turns: Iterable[Turn], agent: str) -> Iterable[tuple[Any, ...]]:
    link = turn_link(run)
    agent_q = f"?agent={urlencode(agent)}" if agent else ""
    esc = escaper()
    util = _util_bars()
    for t in turns:
        failure = t.failure
        peak = t.peak_utilization
        errors = t.errors
        started = t.started_at
        yield (
            link(t.number) + agent_q,
            esc(t.number),
            format_html(' <span class="badge badge--bad" title="{}">failed</span>', esc(failure))
            if failure
            else "",
            esc(t.steps),
            esc(t.prompt_tokens),
            esc(t.completion_tokens),
            tokens(t.tokens),
            MUTED_DASH if peak is None else util(peak),
            esc(t.strategy or DASH),
            esc(t.compressions or DASH),
            format_html('<span class="prim-count">{}</span>', esc(t.primitives))
            if t.primitives
            else MUTED_DASH,
            esc(t.tool_calls or DASH),
            format_html(
                ' <span class="bad" title="{} error{}">✗{}</span>',
                esc(errors),
                pluralize(errors),
                esc(errors),
            )
            if errors
            else "",
            format_html('<time datetime="{}">{}</time>', *_time_pair(started)) if started else "",
        )


def _util_bars() -> Callable[[Any], SafeString]:
    """A utilization's bar (`_UTIL`), drawn once per width and label (a page has at most a hundred)."""
    drawn: dict[tuple[str, str, str], SafeString] = {}

    def bar(peak: Any) -> SafeString:
        key = (util_level(peak), pct_class(peak), pct(peak))
        found = drawn.get(key)
        if found is None:
            found = drawn[key] = format_html(_UTIL, *key)
        return found

    return bar


# ---------------------------------------------------------------------------------------------------
# The cognitive calls (templates/traces/_cognitive.html)

_COGNITIVE_ROW = (
    "\n  <tr>\n"
    '    <td class="num muted">{}</td>\n'
    '    <td class="nowrap mono small"><time datetime="{}">{}</time></td>\n'
    "    {}\n"
    '    <td class="nowrap">{}</td>\n'
    '    <td><span class="prim prim--{}">{}</span></td>\n'
    '    <td class="preview"><span class="mono small">{}</span> {}</td>\n'
    "  </tr>\n  "
)


def cognitive_rows_html(run: Run, primitives: Sequence[tuple[PrimitiveEvent, str]]) -> SafeString:
    """The cognitive calls' `<tr>` rows: (call, its one-line summary) each."""
    return rows_html(_COGNITIVE_ROW, list(_cognitive_cells(run, primitives)))


def _cognitive_cells(run: Run, primitives: Sequence[tuple[PrimitiveEvent, str]]) -> Iterable[tuple[Any, ...]]:
    link = turn_link(run)
    with_agents = bool(run.agents)
    esc = escaper()
    for n, (ev, line) in enumerate(primitives, 1):
        turn = ev.turn_number
        if turn:
            step = ev.step_number
            where = format_html(
                '<a href="{}#step-{}">turn {}{}</a>',
                link(turn) + (f"?agent={urlencode(ev.agent)}" if ev.agent else ""),
                esc(step or 1),
                esc(turn),
                format_html(".{}", esc(step)) if step else "",
            )
        else:
            where = MUTED_DASH
        primitive = esc(ev.primitive)
        yield (
            n,
            *_time_pair(ev.timestamp),
            format_html("<td>{}</td>", esc(ev.agent or DASH)) if with_agents else "",
            where,
            primitive,
            primitive,
            esc(line),
            "" if ev.ok else NO_EFFECT,
        )


# ---------------------------------------------------------------------------------------------------
# The fidelity map (templates/traces/_fidelity_map.html)


def fidelity_groups_html(fmap: FidelityMap) -> SafeString:
    """The map's four `<g>` groups: turn separators, turn ticks, row labels, cells."""
    esc = escaper()
    top, height, label_x, cell_h = (
        esc(add(fmap.top, -4)),
        esc(fmap.height),
        esc(fmap.label_x),
        esc(fmap.cell_h),
    )
    seps = rows_html(
        '<line x1="{}" y1="{}" x2="{}" y2="{}"/>', [(esc(x), top, esc(x), height) for x in fmap.separators]
    )
    ticks = rows_html(
        '<a href="{}"><text x="{}" y="14">{}</text></a>',
        [(esc(t.url), esc(t.x), esc(t.label)) for t in fmap.ticks],
    )
    labels = rows_html(
        '<text x="{}" y="{}"{}>{}</text>',
        [(label_x, esc(r.y), PIN_CLASS if r.is_pin else "", esc(r.label)) for r in fmap.rows if r.label],
    )
    cells = rows_html(
        '<rect class="fcell f-{}" x="{}" y="{}" width="{}" height="{}"><title>{}</title></rect>',
        [(esc(c.cls), esc(c.x), esc(c.y), esc(c.w), cell_h, esc(c.title)) for c in fmap.cells],
    )
    return format_html(
        '<g class="fmap-seps">{}</g>\n  <g class="fmap-ticks">{}</g>\n'
        '  <g class="fmap-labels">{}</g>\n  <g class="fmap-cells">{}</g>',
        seps,
        ticks,
        labels,
        cells,
    )


# ---------------------------------------------------------------------------------------------------
# The pin lanes (templates/traces/_pin_lanes.html)

_PIN_LANE = (
    '\n  <g class="pin-lane pin-lane--{}">\n'
    '    <text class="lane-label" x="{}" y="{}">{}</text>\n'
    '    <rect x="{}" y="{}" width="{}" height="16" rx="3"><title>{}</title></rect>\n'
    '    <text class="lane-tokens" x="{}" y="{}">{} tok</text>\n'
    "  </g>\n  "
)


def pin_lanes_svg_html(pins: PinChart) -> SafeString:
    """The chart's lanes: one `<g>` a pin, its label, bar (with its hover text) and tokens."""
    esc = escaper()
    label_x = esc(pins.label_x)
    return rows_html(
        _PIN_LANE,
        [
            (
                esc(lane.ended_by),
                label_x,
                esc(lane.text_y),
                esc(truncatechars(lane.pin.label or lane.pin.pin_id, 26)),
                esc(lane.x),
                esc(lane.bar_y),
                esc(lane.w),
                esc(lane.title),
                esc(lane.text_x),
                esc(lane.text_y),
                esc(lane.pin.tokens or "?"),
            )
            for lane in pins.lanes
        ],
    )


_PIN_ROW = (
    "\n  <tr>\n"
    '    <td class="mono">{}</td>\n'
    '    <td class="preview">{}</td>\n'
    '    <td class="num">{}</td>\n'
    '    <td><a href="{}">turn {}</a></td>\n'
    "    <td>{}</td>\n"
    "    <td>{}</td>\n"
    "  </tr>\n  "
)


def pin_rows_html(run: Run, pins: PinChart, agent: str) -> SafeString:
    """The pins table's rows: one a lane, with the link to the turn the pin was made in."""
    link = turn_link(run)
    agent_q = f"?agent={urlencode(agent)}" if agent else ""
    esc = escaper()
    rows = []
    for lane in pins.lanes:
        pin = lane.pin
        if lane.ended_by == "unpinned":
            ended: Any = format_html("unpinned at turn {}", esc(lane.end_turn))
        elif lane.ended_by == "expired":
            ended = format_html("expired after turn {}", esc(lane.end_turn))
        else:
            ended = ACTIVE_AT_END
        rows.append(
            (
                esc(pin.pin_id),
                esc(pin.label or DASH),
                esc(pin.tokens or "?"),
                link(pin.created_turn) + agent_q,
                esc(pin.created_turn),
                format_html("turn {}", esc(pin.until_turn)) if pin.until_turn is not None else NO_EXPIRY,
                ended,
            )
        )
    return rows_html(_PIN_ROW, rows)
