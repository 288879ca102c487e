"""The dashboard's charts: bars per day drawn as server-side SVG (no script, nothing from a CDN), each
bar a link to the runs list with the chart's filter for that day, and each chart backed by a data
table holding the same numbers and links (`templates/dashboard/_chart.html`).

The SVG is decoration for sighted readers (`aria-hidden`, its links out of the tab order); the table
is what assistive technology and the keyboard use (WCAG 2 AA: 1.1.1, 1.3.1, 2.1.1)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from traces.dashboard.figures import DayFigures, Figures

WIDTH, HEIGHT = 720, 180
TOP, BOTTOM, LEFT = 12, 22, 4
PLOT = HEIGHT - TOP - BOTTOM


@dataclass(frozen=True)
class Series:
    """One measure drawn per day: its name, CSS class, value, its text, and the runs-list filter a bar
    of it links to (`{"status": "failed"}`…, with the day and the dashboard's filter)."""

    name: str
    css: str
    value: Callable[[DayFigures], float | None]
    text: Callable[[float | None], str]
    runs_filter: dict[str, str] = field(default_factory=dict)


@dataclass
class Bar:
    x: float
    y: float
    width: float
    height: float
    css: str
    title: str
    href: str


@dataclass
class Chart:
    key: str
    title: str
    description: str
    series: list[Series]
    bars: list[Bar]
    ticks: list[tuple[float, str]]
    top_label: str
    rows: list[dict[str, Any]]
    legend: list[tuple[Series, str]]
    width: int = WIDTH
    height: int = HEIGHT
    baseline: float = TOP + PLOT

    @property
    def svg(self) -> SafeString:
        return svg_html(self)

    @property
    def rows_html(self) -> SafeString:
        return rows_html(self)


def svg_html(chart: Chart) -> SafeString:
    """The chart's SVG bars and day labels, drawn here rather than by template loops (a 90-day
    dashboard has ~1,500 bars and ~700 table rows), with `format_html_join`: every value escaped."""
    bars = format_html_join(
        "",
        '<a href="{}" tabindex="-1"><rect class="bar {}" x="{}" y="{}" width="{}" height="{}"><title>{}</title>'
        "</rect></a>",
        ((b.href, b.css, b.x, b.y, b.width, b.height, b.title) for b in chart.bars if b.height),
    )
    y = chart.height - 6
    ticks = format_html_join(
        "",
        '<text class="chart__tick" x="{}" y="{}" text-anchor="middle">{}</text>',
        ((x, y, label) for x, label in chart.ticks),
    )
    return format_html("{}{}", bars, ticks)


def rows_html(chart: Chart) -> SafeString:
    """The data table's body: a row per day with its numbers and the links to the runs behind them."""
    rows = []
    for row in chart.rows:
        day = row["day"]
        label = f"{day:%b %-d}"
        cells = format_html_join("", '<td class="num">{}</td>', ((c,) for c in row["cells"]))
        links = format_html_join(
            " · ",
            '<a href="{}">{}<span class="visually-hidden"> on {}</span></a>',
            ((href, name, label) for name, href in row["links"]),
        )
        rows.append((day.isoformat(), f"{day:%a %b %-d}", cells, links))
    return format_html_join(
        "", '<tr><th scope="row"><time datetime="{}">{}</time></th>{}<td>{}</td></tr>', rows
    )


def _ticks(days: list[dt.date], slot: float) -> list[tuple[float, str]]:
    step = max(1, len(days) // 6)
    return [(LEFT + i * slot + slot / 2, d.strftime("%b %-d")) for i, d in enumerate(days) if i % step == 0]


def chart(
    figs: Figures,
    url: Callable[[dt.date | None, dict[str, str]], str],
    key: str,
    title: str,
    description: str,
    series: list[Series],
    *,
    stacked: bool = False,
) -> Chart:
    """A bar chart of `series` over the days of `figs`; grouped bars side by side, or `stacked`.
    `url(day, extra)`: the runs list for a day (None: the whole range) with the series' filter."""
    days = [d for d in figs.days if d.day is not None]
    n = max(len(days), 1)
    slot = (WIDTH - 2 * LEFT) / n
    values = [[s.value(d) or 0.0 for s in series] for d in days]
    top = max((sum(v) if stacked else max(v, default=0.0)) for v in values) if values else 0.0
    scale = PLOT / top if top > 0 else 0.0
    bars: list[Bar] = []
    width = slot * 0.8 if stacked else slot * 0.8 / len(series)
    for i, d in enumerate(days):
        assert d.day is not None
        base: float = TOP + PLOT
        for j, s in enumerate(series):
            v = values[i][j]
            h = v * scale
            x = LEFT + i * slot + slot * 0.1 + (0 if stacked else j * width)
            y = base - h
            bars.append(
                Bar(round(x, 2), round(y, 2), round(max(width - 1, 1), 2), round(h, 2), s.css,
                    f"{d.day:%b %-d}: {s.name} {s.text(s.value(d))}", url(d.day, s.runs_filter))
            )  # fmt: skip
            if stacked:
                base = y
    rows = [
        {
            "day": d.day,
            "cells": [s.text(s.value(d)) for s in series],
            "links": [(s.name, url(d.day, s.runs_filter)) for s in series if s.runs_filter]
            or [("runs", url(d.day, {}))],
        }
        for d in days
    ]
    return Chart(
        key=key,
        title=title,
        description=description,
        series=series,
        bars=bars,
        ticks=_ticks([d.day for d in days if d.day is not None], slot),
        top_label=series[0].text(top) if top else "",
        rows=rows,
        legend=[(s, s.text(s.value(figs.total))) for s in series],
    )


def _int(v: float | None) -> str:
    return "—" if v is None else f"{int(v):,}"


def _rate(v: float | None) -> str:
    return "—" if v is None else f"{v * 100:.1f}%"


def _ms(v: float | None) -> str:
    if v is None:
        return "—"
    return f"{v:.0f} ms" if v < 1000 else f"{v / 1000:.1f} s" if v < 60_000 else f"{v / 60_000:.1f} min"


def _usd(v: float | None) -> str:
    from runtime.pricing import format_usd

    return format_usd(v)


def _avg(v: float | None) -> str:
    return "—" if v is None else f"{v:.2f}"


def dashboard_charts(figs: Figures, url: Callable[[dt.date | None, dict[str, str]], str]) -> list[Chart]:
    """The dashboard's charts, in the order of the page. Long because it is a list of chart specs."""
    ok = Series("finished without failing", "s-ok", lambda d: d.runs - d.failed, _int)
    failed = Series("failed", "s-bad", lambda d: d.failed, _int, {"status": "failed"})
    return [
        chart(figs, url, "runs", "Runs per day", "Runs that started each day (UTC), failed ones on top.",
              [ok, failed], stacked=True),
        chart(figs, url, "failures", "Failure rate", "Failed runs over the runs that started that day.",
              [Series("failure rate", "s-bad", lambda d: d.failure_rate, _rate, {"status": "failed"})]),
        chart(figs, url, "run-latency", "Run duration, p50 and p95",
              "How long finished runs took from their first event to their last.",
              [Series("p50", "s-a", lambda d: d.run_p50, _ms), Series("p95", "s-b", lambda d: d.run_p95, _ms)]),
        chart(figs, url, "step-latency", "Step latency, p50 and p95", "How long each model call took.",
              [Series("p50", "s-a", lambda d: d.step_p50, _ms), Series("p95", "s-b", lambda d: d.step_p95, _ms)]),
        chart(figs, url, "tokens", "Tokens per day", "Prompt and completion tokens of every step.",
              [Series("prompt tokens", "s-a", lambda d: d.prompt_tokens, _int),
               Series("completion tokens", "s-b", lambda d: d.completion_tokens, _int)], stacked=True),
        chart(figs, url, "cost", "Cost per day",
              "The priced steps' cost with this project's prices; tokens of models without a price are not counted.",
              [Series("cost", "s-cost", lambda d: d.cost_usd, _usd)]),
        chart(figs, url, "compactions", "Compactions and lost instructions per run",
              "Decisions that dropped or condensed messages, and instructions a later call no longer saw, per run.",
              [Series("compactions per run", "s-a", lambda d: d.compactions_per_run, _avg, {"had_compaction": "1"}),
               Series("lost instructions per run", "s-bad", lambda d: d.lost_per_run, _avg,
                      {"lost_instruction": "1"})]),
        chart(figs, url, "primitives", "Pin and recall use", "Runs that pinned content and runs that recalled.",
              [Series("runs with pins", "s-a", lambda d: d.runs_pinned, _int, {"has_pins": "1"}),
               Series("runs with recalls", "s-b", lambda d: d.runs_recalled, _int, {"has_recalls": "1"})]),
    ]  # fmt: skip
