"""The fidelity map: a window of an agent's steps drawn as rows (messages, then pinned blocks) ×
columns (steps), one rectangle per run of equal outcomes; cached per run state."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from django.core.cache import cache
from django.utils.safestring import SafeString

from runtime.facts import rendered_pins
from traces.models import (
    MESSAGE_DECISION_KEYS,
    ContextDecision,
    Pin,
    Run,
    message_decision_rows,
)
from traces.runs.run_page import fidelity_groups_html


def outcome_class(d: Mapping[str, Any]) -> str:
    """The fidelity-map class of one message decision: pin, L0–L3, dropped or summarized."""
    if d.get("pinned") or d.get("reason") == "pinned":
        return "pin"
    outcome = d.get("outcome") or ""
    if outcome in ("dropped", "summarized"):
        return outcome
    fidelity = d.get("fidelity")
    if fidelity in ("L0", "L1", "L2", "L3"):
        return str(fidelity)
    # `kept` with no fidelity is the original message: full fidelity.
    return "L0" if outcome == "kept" else "L1" if outcome == "compressed" else "L0"


def outcome_label(d: Mapping[str, Any]) -> str:
    outcome = d.get("outcome") or "?"
    fidelity = d.get("fidelity")
    return f"{outcome} at {fidelity}" if fidelity else str(outcome)


@dataclass
class MapCell:
    # Coordinates are pre-formatted strings: a window draws a thousand cells or more, and Django's
    # float localization in templates would otherwise dominate the page's render time.
    x: str
    y: str
    w: str
    cls: str
    title: str


@dataclass
class MapRow:
    y: str
    label: str
    title: str
    is_pin: bool


@dataclass
class MapTick:
    x: str
    label: str
    url: str


@dataclass
class FidelityMap:
    """A window of steps drawn as rows (messages, then pinned blocks) × columns (steps).

    Cells are run-length encoded along a row: consecutive steps where a message had the same outcome
    become one rectangle, which keeps a 200-message × 100-step window to a few hundred elements.
    """

    total_steps: int
    start: int  # 0-based index of the first step shown
    window: int
    columns: list[dict[str, Any]]
    rows: list[MapRow]
    cells: list[MapCell]
    ticks: list[MapTick]
    separators: list[str]
    width: float
    height: float
    x0: float
    cw: float
    ch: float
    top: float
    legend: list[tuple[str, str]] = field(default_factory=list)
    truncated_rows: bool = False
    #: The drawn groups (`traces.runs.run_page.fidelity_groups_html`, markup by `format_html`), kept with
    #: the map in the cache: a window's thousand-odd rectangles are drawn once per run state, not per view.
    drawn: SafeString | None = None

    @property
    def label_x(self) -> float:
        return self.x0 - 6

    @property
    def cell_h(self) -> float:
        return self.ch - 1 if self.ch >= 11 else self.ch - 0.5

    @property
    def end(self) -> int:
        return min(self.total_steps, self.start + self.window)

    @property
    def max_start(self) -> int:
        return max(0, self.total_steps - self.window)

    @property
    def windowed(self) -> bool:
        return self.total_steps > self.window


LEGEND = [
    ("L0", "L0 — original"),
    ("L1", "L1 — first 300 chars"),
    ("L2", "L2 — first 80 chars"),
    ("L3", "L3 — stub"),
    ("summarized", "summarized"),
    ("dropped", "dropped"),
    ("pin", "pinned block"),
]


MAP_WINDOW = 100  # steps per window; a wider map stops being readable and grows the page


MAP_LABEL_WIDTH = 150.0


MAP_MAX_ROWS = 400  # rows beyond this are cut (with a note); keeps the SVG under a few hundred KB


def fidelity_map(
    run: Run,
    agent: str,
    start: int | None = None,
    window: int = MAP_WINDOW,
    *,
    scale_steps: int | None = None,
) -> FidelityMap:
    """Build the map for `agent`'s steps [start, start + window). Four queries: a count, the window's
    ids, its decisions and the agent's pins.

    `start=None` shows the last window (where a long conversation has faded most). `scale_steps`
    sizes the columns as if the window held that many steps, so two maps drawn one above the other
    (the compare page) share one scale.

    Why a cache: a window is 100 steps × their message decisions (20,000 cells to classify for a run
    of 200-message working sets, most of the overview's server time); the map of a run that is not
    updating cannot change, and a changed run has a new `updated_at`, hence a new key."""
    stamp = run.updated_at.isoformat() if run.updated_at else ""
    # The map holds links (`run.turn_url`): a shared page's are the share's own, so the address is
    # part of the key (hashed: keys stay short and printable whatever the run id or agent).
    parts = f"{run.pk}:{stamp}:{agent}:{start}:{window}:{scale_steps}:{run.turn_url(1)}"
    key = f"arcana:fmap:{MAP_CACHE_VERSION}:{hashlib.sha256(parts.encode()).hexdigest()}"
    cached = cache.get(key)
    if isinstance(cached, FidelityMap):
        return cached
    fmap = _fidelity_map(run, agent, start, window, scale_steps)
    fmap.drawn = fidelity_groups_html(fmap)
    if not run.is_updating:
        cache.set(key, fmap, MAP_CACHE_SECONDS)
    return fmap


#: Bumped when `FidelityMap`'s shape changes, so cached maps of an older shape are not read.
MAP_CACHE_VERSION = 3


MAP_CACHE_SECONDS = 3600


def _fidelity_map(
    run: Run, agent: str, start: int | None, window: int, scale_steps: int | None
) -> FidelityMap:
    total, start, window, steps = _map_window(run, agent, start, window)
    n = len(steps)
    cw = max(5.0, min(64.0, 960.0 / max(scale_steps or n, n, 1)))
    columns, per_row, row_meta = _map_outcomes(run, agent, steps)
    keys = sorted(per_row, key=lambda k: (k[0], k[1] if k[0] == 0 else str(k[1])))
    truncated = len(keys) > MAP_MAX_ROWS
    keys = keys[:MAP_MAX_ROWS]
    ch = 16.0 if len(keys) <= 40 else 11.0 if len(keys) <= 120 else 8.0
    top = 22.0
    x0 = MAP_LABEL_WIDTH
    rows, cells = _map_rows(keys, per_row, row_meta, x0=x0, cw=cw, ch=ch, top=top)
    ticks, separators = _map_ticks(steps, columns, x0=x0, cw=cw)
    return FidelityMap(
        total_steps=total,
        start=start,
        window=window,
        columns=columns,
        rows=rows,
        cells=cells,
        ticks=ticks,
        separators=separators,
        width=x0 + n * cw + 4,
        height=top + len(keys) * ch + 4,
        x0=x0,
        cw=cw,
        ch=ch,
        top=top,
        legend=LEGEND,
        truncated_rows=truncated,
    )


# A step of the window: (turn, step, strategy, its message decisions as rows of values in
# `MESSAGE_DECISION_KEYS` order).
_MapStep = tuple[int, int, str, list[list[Any]]]

# Where each value of a decision row is (`message_decision_rows`).
_AT = {key: i for i, key in enumerate(MESSAGE_DECISION_KEYS)}
_INDEX, _ROLE, _OUTCOME, _FIDELITY, _REASON, _PINNED, _PIN_ID = (
    _AT[k] for k in ("index", "role", "outcome", "fidelity", "reason", "pinned", "pin_id")
)


# A row of the map: (0, message index) or (1, pin id); pins sort after messages.
_RowKey = tuple[int, Any]


# A row's cells before run-length encoding: (column, CSS class, decision row).
_RowCells = dict[_RowKey, list[tuple[int, str, list[Any]]]]


def _map_window(run: Run, agent: str, start: int | None, window: int) -> tuple[int, int, int, list[_MapStep]]:
    """The agent's step count, the clamped window and its steps (three queries)."""
    decisions = ContextDecision.objects.filter(run=run, agent=agent)
    total = decisions.count()
    window = max(10, min(window, 400))
    if start is None:
        start = max(0, total - window)
    start = max(0, min(start, max(0, total - window)))
    # Pick the window's ids first: sorting the full rows would drag every step's decision array
    # (tens of KB each) through the sorter; then read the arrays of the window only. A window in the
    # run's second half is counted from its end (the index read backwards), so the last window, the
    # page's default, reads its own steps only, however long the run.
    after = max(0, total - start - window)
    if after < start:
        ids = list(
            decisions.order_by("-turn_number", "-step_number").values_list("id", flat=True)[
                after : after + min(window, total - start)
            ]
        )[::-1]
    else:
        ids = list(
            decisions.order_by("turn_number", "step_number").values_list("id", flat=True)[
                start : start + window
            ]
        )
    rows_qs = (
        ContextDecision.objects.filter(id__in=ids)
        .order_by("turn_number", "step_number")
        .values_list("turn_number", "step_number", "strategy", "message_table")
    )
    steps = [(t, s, strategy, message_decision_rows(table)) for t, s, strategy, table in rows_qs]

    return total, start, window, steps


def _map_outcomes(
    run: Run, agent: str, steps: list[_MapStep]
) -> tuple[list[dict[str, Any]], _RowCells, dict[_RowKey, tuple[str, str]]]:
    """Each step's column (label, link), each row's cells, and each row's label and title (one query:
    the agent's pins)."""
    agent_q = f"?{urlencode({'agent': agent})}" if agent else ""
    # Arcana 1.2 pin decisions carry no pin_id: the k-th pinned block of a step is the k-th pin active
    # at its turn (pins are rendered in creation order), so resolve them against the agent's pins.
    pins = list(Pin.objects.filter(run=run, agent=agent).order_by("created_turn", "created_step", "id"))
    # Collect the per-message outcome for every column, keyed by row key.
    per_row: _RowCells = {}
    row_meta: dict[_RowKey, tuple[str, str]] = {}
    columns: list[dict[str, Any]] = []
    cls_cache: dict[tuple[Any, ...], str] = {}
    for col, (turn_number, step_number, strategy, mds) in enumerate(steps):
        turn_url = run.turn_url(turn_number) + agent_q + f"#step-{step_number}"
        columns.append(
            {
                "label": f"Turn {turn_number} · step {step_number} · {strategy or 'no strategy'}",
                "url": turn_url,
            }
        )
        pin_k = 0
        active: list[Pin] | None = None
        # The hot loop of a first view (100 steps × their decisions): values read by position, and
        # a label, class or list made once per row or per kind of outcome, not once per decision.
        for d in mds:
            reason = d[_REASON]
            if d[_PINNED] or reason == "pinned":  # is_pin_decision, inlined
                pin_k += 1
                pin_id = d[_PIN_ID]
                if not pin_id:
                    # Rows stored before ingestion named Arcana's pinned blocks (rebuild_projections).
                    if active is None:
                        active = rendered_pins(pins, turn_number)
                    pin_id = active[pin_k - 1].pin_id if pin_k <= len(active) else f"#{pin_k}"
                key: tuple[int, Any] = (1, pin_id)
                if key not in row_meta:
                    label = next((p.label for p in pins if p.pin_id == pin_id and p.label), "") or pin_id
                    row_meta[key] = (f"[PIN] {label[:18]}", f"pinned block {pin_id} ({label})")
            else:
                idx = d[_INDEX]
                if idx is None:
                    continue
                key = (0, int(idx))
                if key not in row_meta:
                    row_meta[key] = (f"#{idx} {d[_ROLE] or '?'}", f"message {idx} ({d[_ROLE]})")
            # The hover text is built later, once per drawn cell, not once per decision.
            ck = (d[_OUTCOME], d[_FIDELITY], d[_PINNED], reason)
            cls = cls_cache.get(ck)
            if cls is None:
                cls = cls_cache[ck] = outcome_class(_as_dict(d))
            cells = per_row.get(key)
            if cells is None:
                cells = per_row[key] = []
            cells.append((col, cls, d))

    return columns, per_row, row_meta


def _map_rows(
    keys: list[_RowKey],
    per_row: _RowCells,
    row_meta: dict[_RowKey, tuple[str, str]],
    *,
    x0: float,
    cw: float,
    ch: float,
    top: float,
) -> tuple[list[MapRow], list[MapCell]]:
    """The rows' labels and their cells, run-length encoded: equal outcomes in consecutive steps are
    one rectangle."""
    rows: list[MapRow] = []
    cells: list[MapCell] = []
    for r, key in enumerate(keys):
        y = top + r * ch
        label, title = row_meta[key]
        # Small rows get a label every fifth row; the tooltip names every row.
        shown = ch >= 11 or r % 5 == 0 or key[0] == 1
        rows.append(
            MapRow(y=f"{y + ch - 3:.1f}", label=label if shown else "", title=title, is_pin=key[0] == 1)
        )
        run_start: tuple[int, str, str] | None = None
        prev_col = -2
        for col, cls, d in per_row[key]:
            if run_start and cls == run_start[1] and col == prev_col + 1:
                prev_col = col
                continue
            if run_start:
                cells.append(_cell(run_start, prev_col, x0, cw, y, ch))
            run_start, prev_col = (col, cls, _cell_title(title, _as_dict(d))), col
        if run_start:
            cells.append(_cell(run_start, prev_col, x0, cw, y, ch))

    return rows, cells


def _map_ticks(
    steps: list[_MapStep], columns: list[dict[str, Any]], *, x0: float, cw: float
) -> tuple[list[MapTick], list[str]]:
    """Turn labels where there is room, and a separator line at each turn's first step."""
    ticks: list[MapTick] = []
    separators: list[str] = []
    last_turn: int | None = None
    last_tick_col = -(10**6)
    # Label a turn only when there is room for it (about 40 px between labels).
    tick_every = max(1, round(40 / cw))
    for col, (turn_number, _step, _strategy, _mds) in enumerate(steps):
        if turn_number == last_turn:
            continue
        if col:
            separators.append(f"{x0 + col * cw:.1f}")
        if col - last_tick_col >= tick_every:
            ticks.append(MapTick(x=f"{x0 + col * cw:.1f}", label=f"T{turn_number}", url=columns[col]["url"]))
            last_tick_col = col
        last_turn = turn_number
    return ticks, separators


def _as_dict(row: list[Any]) -> dict[str, Any]:
    return dict(zip(MESSAGE_DECISION_KEYS, row, strict=True))


def _cell_title(row_title: str, d: Mapping[str, Any]) -> str:
    rel = d.get("relevance_score")
    return (
        f"{row_title}: {outcome_label(d)}, {d.get('token_count_before')}→{d.get('token_count_after')} tokens"
        f"{f', relevance {rel:.2f}' if isinstance(rel, int | float) else ''}"
        f"\nreason: {d.get('reason') or '—'}"
    )


def _cell(start: tuple[int, str, str], end_col: int, x0: float, cw: float, y: float, ch: float) -> MapCell:
    col, cls, title = start
    span = end_col - col + 1
    suffix = f"\n(same for {span} steps)" if span > 1 else ""
    # A hairline gap between cells keeps columns countable when they are wide enough to afford it.
    return MapCell(
        x=f"{x0 + col * cw:.1f}",
        y=f"{y:.1f}",
        w=f"{span * cw - (1 if cw >= 6 else 0):.1f}",
        cls=cls,
        title=title + suffix,
    )
