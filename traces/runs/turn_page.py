"""The turn page's parts that come from the run's projections alone, built once per run state.

A turn page of a long run shows hundreds of message decisions per step (a 200-message working set
is 200 table rows a step). `turn_parts` reads the turn (and its neighbours), its steps with their
context decisions, the agent's pins, the turn's primitive calls and the decision before the turn, and
returns everything the page draws from them: each step's decision table already rendered
(`decision_table_html`), what changed since the previous step, the primitive calls with their one-line
summaries, the prompt snapshot, the active pins and the links to the neighbouring turns.

Why the table is built in Python: through the template, each of its ~3,000 cells cost a variable
lookup, localization and an escape call (two thirds of the page's server time for 2 steps × 200
decisions). `decision_table_html` writes the same markup with every value escaped as the template's
auto-escaping does (`html.escape`, numbers and other values printed as the template prints them).

Why a cache: the parts of a run that is not updating cannot change, and a changed run has a new
`updated_at` (ingestion and `rebuild_projections` set it), hence a new key, as for the fidelity map
(`traces.runs.charts.fidelity_map`). A run that is updating is always read afresh. What is cached is the
run's own data: no notes, no forms or tokens, no links, nothing about the reader; the caller checks
access before asking (`traces.core.access`, a share link's token), and the key holds the run's
primary key, so a page of another run, project or team can never be answered from it. The decision
table shows a pin's label and id only, never its content, so a share link that hides content
(`traces.collab.sharing.redact`, applied to the parts after they are read) shows the same table.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from django.core.cache import cache
from django.db import connection
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from traces.core import prepared, sqlread
from traces.dashboard.composition import Composition, step_composition
from traces.models import ContextDecision, Pin, PrimitiveEvent, Run, Step, Turn, unpack_message_decisions
from traces.runs import queries
from traces.runs.run_page import EMPTY, Escaper, escaper, rows_html

#: Bumped when the parts' shape or the table's markup changes, so older cached parts are not read.
TURN_CACHE_VERSION = 3  # 3: StepPart.composition (issue 37)

TURN_CACHE_SECONDS = 3600

#: "What changed" lists this many messages; the rest are counted and flagged in the table.
CHANGES_LISTED = 30


@dataclass
class StepPart:
    step: Step
    decision: ContextDecision | None
    table: str  # the decision table (`decision_table_html`, markup by `format_html`), "" without a decision
    changes: queries.StepChanges | None
    changes_html: str  # "what changed" (`changes_html`, markup by `format_html`), "" for a run's first step
    primitives: list[tuple[PrimitiveEvent, str]]  # (call, its one-line summary)
    snapshot: dict[str, Any] | None
    # What filled the step's context (issue 37, `traces.dashboard.composition`), worked out from the
    # decision's table before the table is dropped from the cached parts.
    composition: Composition | None = None


@dataclass
class TurnParts:
    turn: Turn
    steps: list[StepPart]
    active_pins: list[Pin]
    loose_primitives: list[tuple[PrimitiveEvent, str]]  # calls not tied to a step
    prev_turn: int | None
    next_turn: int | None
    #: The cache key of these parts when the run was not updating ("" else): the step parts drawn from
    #: them are cached under it too (`turn_page_tags.turn_step_part`).
    key: str = ""


def turn_parts(run: Run, agent: str, number: int) -> TurnParts | None:
    """Turn `number` of `agent`'s steps in `run` (None when there is no such turn): from the cache when
    the run is not updating and was viewed since it last changed, else five queries."""
    cacheable = not run.is_updating
    key = cache_key(run, agent, number)
    if cacheable:
        cached = cache.get(key)
        if isinstance(cached, TurnParts):
            return cached
    built = _build(run, agent, number)
    if built is not None and cacheable:
        built.key = key
        cache.set(key, built, TURN_CACHE_SECONDS)
    return built


def cache_key(run: Run, agent: str, number: int) -> str:
    """The parts' key: the run (its primary key, with its project and id) in its present state
    (`updated_at`), the agent and the turn; hashed, so keys stay short whatever the run id or agent."""
    stamp = run.updated_at.isoformat() if run.updated_at else ""
    parts = f"{run.pk}:{run.project_id}:{run.run_id}:{stamp}:{agent}:{number}"
    return f"arcana:turn:{TURN_CACHE_VERSION}:{hashlib.sha256(parts.encode()).hexdigest()}"


def _build(run: Run, agent: str, number: int) -> TurnParts | None:
    near = {
        t.number: t
        for t in sqlread.fetch(Turn, _sql("turns"), [run.pk, agent, number - 1, number, number + 1])
    }
    turn = near.get(number)
    if turn is None:
        return None
    steps = _steps(turn)
    pins = sqlread.fetch(Pin, _sql("pins"), [run.pk, agent])
    primitives = sqlread.fetch(PrimitiveEvent, _sql("primitives"), [run.pk, agent, number])
    # The step before this turn's first step, for "what changed" on step 1.
    with prepared.cursor() as cursor:
        cursor.execute(_sql("previous"), [run.pk, agent, number])
        previous = cursor.fetchone()
    prev_label = f"turn {previous[0]} step {previous[1]}" if previous else ""
    prev_mds = unpack_message_decisions(previous[2]) if previous else None
    prev_turn = previous[0] if previous else 0
    summaries = [(ev, queries.primitive_summary(ev)) for ev in primitives]
    esc = escaper()  # one for the turn: its steps' tables repeat most of their values
    out = []
    for step in steps:
        decision = getattr(step, "decision", None)
        table, changes, listed = "", None, ""
        composition = step_composition(step, decision)
        if decision is not None:
            mds = decision.message_decisions
            table = decision_table_html(queries.decision_rows(mds, prev_mds, pins, number), esc)
            changes = queries.step_changes(mds, prev_mds, prev_label, pins, number, prev_turn)
            if changes is not None:
                changes = _listed(changes)
                listed = changes_html(changes, esc)
            prev_mds, prev_label, prev_turn = mds, f"turn {step.turn_number} step {step.number}", number
            _drop_message_table(decision)
        out.append(
            StepPart(
                step=step,
                decision=decision,
                table=table,
                changes=changes,
                changes_html=listed,
                primitives=[(ev, line) for ev, line in summaries if ev.step_id == step.id],
                snapshot=_snapshot(step.prompt_snapshot),
                composition=composition,
            )
        )
    return TurnParts(
        turn=turn,
        steps=out,
        # Same rule as Run.active_pins_at (DESIGN.md §1), applied to the pins already loaded.
        active_pins=[p for p in pins if p.is_active_at(number)],
        loose_primitives=[(ev, line) for ev, line in summaries if ev.step_id is None],
        prev_turn=number - 1 if number - 1 in near else None,
        next_turn=number + 1 if number + 1 in near else None,
    )


def _steps(turn: Turn) -> list[Step]:
    """The turn's steps by number, each with its context decision loaded (None when it has none), as
    `select_related("decision")` loads them."""
    out = []
    for step, decision in sqlread.fetch_joined((Step, ContextDecision), _sql("steps"), [turn.pk]):
        found = decision if decision.pk is not None else None
        _step_decision.set_cached_value(step, found)
        if found is not None:
            _decision_step.set_cached_value(found, step)
        out.append(step)
    return out


_step_decision = Step.decision.related  # the reverse side (OneToOneRel), as select_related sets it
_decision_step = ContextDecision._meta.get_field("step")


@functools.cache
def _sql(name: str) -> str:
    """The turn's reads (`_build`), in SQL written once (`traces.core.sqlread`): the ORM spent more
    building these five small queries than the database running them, on every first view of a turn.
    The same rows in the same order as the querysets they replace (tests/traces/runs/test_turn_page.py)."""
    qn = connection.ops.quote_name

    def col(model: Any, field: str) -> str:
        return f"{qn(model._meta.db_table)}.{qn(model._meta.get_field(field).column)}"

    step_t, decision_t = qn(Step._meta.db_table), qn(ContextDecision._meta.db_table)
    return {
        "turns": f"WHERE {col(Turn, 'run')} = %s AND {col(Turn, 'agent')} = %s AND {col(Turn, 'number')} IN (%s, %s, %s)",
        "steps": f"FROM {step_t} LEFT JOIN {decision_t} ON {col(ContextDecision, 'step')} = {col(Step, 'id')} "
        f"WHERE {col(Step, 'turn')} = %s ORDER BY {col(Step, 'number')} ASC",
        "pins": f"WHERE {col(Pin, 'run')} = %s AND {col(Pin, 'agent')} = %s "
        f"ORDER BY {col(Pin, 'created_turn')} ASC, {col(Pin, 'created_step')} ASC, {col(Pin, 'id')} ASC",
        "primitives": f"WHERE {col(PrimitiveEvent, 'run')} = %s AND {col(PrimitiveEvent, 'agent')} = %s "
        f"AND {col(PrimitiveEvent, 'turn_number')} = %s "
        f"ORDER BY {col(PrimitiveEvent, 'timestamp')} ASC, {col(PrimitiveEvent, 'id')} ASC",
        "previous": f"SELECT {col(ContextDecision, 'turn_number')}, {col(ContextDecision, 'step_number')}, "
        f"{col(ContextDecision, 'message_table')} FROM {decision_t} "
        f"WHERE {col(ContextDecision, 'run')} = %s AND {col(ContextDecision, 'agent')} = %s "
        f"AND {col(ContextDecision, 'turn_number')} < %s "
        f"ORDER BY {col(ContextDecision, 'turn_number')} DESC, {col(ContextDecision, 'step_number')} DESC LIMIT 1",
    }[name]


def _listed(changes: queries.StepChanges) -> queries.StepChanges:
    """`changes` with only the messages the page lists (their count is kept)."""
    if len(changes.changed) <= CHANGES_LISTED:
        return changes
    return replace(changes, changed=changes.changed[:CHANGES_LISTED])


def _drop_message_table(decision: ContextDecision) -> None:
    """The page has drawn the decisions into the table: the packed text (the largest value of the
    step) is not kept with the cached parts."""
    decision.message_table = ""
    decision.__dict__.pop("_message_decisions", None)


def _snapshot(snapshot: Any) -> dict[str, Any] | None:
    """The prompt snapshot's messages and tools, tolerating odd shapes (unknown keys are legal)."""
    if not isinstance(snapshot, dict):
        return None
    messages = snapshot.get("messages")
    tools = snapshot.get("tools")
    return {
        "model": snapshot.get("model"),
        "messages": messages if isinstance(messages, list) else [],
        "tools": tools if isinstance(tools, list) else [],
    }


# ---------------------------------------------------------------------------------------------------
# The decision table


_TABLE = (
    '<details class="collapse decisions" {}>\n'
    '<summary><strong>Per-message decisions</strong> <span class="muted small">{} row{}</span></summary>\n'
    '<div class="table-wrap decisions__wrap" tabindex="0" role="region" aria-label="Per-message decisions">\n'
    '<table class="table table--compact decision-table">\n'
    "  <thead><tr>\n"
    '    <th scope="col" class="num">#</th>\n'
    '    <th scope="col">Role</th>\n'
    '    <th scope="col">Outcome</th>\n'
    '    <th scope="col">Fidelity</th>\n'
    '    <th scope="col" class="num">Tokens</th>\n'
    '    <th scope="col" class="num hide-sm">Relevance</th>\n'
    '    <th scope="col">Reason</th>\n'
    "  </tr></thead>\n"
    "  <tbody>\n  {}\n  </tbody>\n</table>\n</div>\n</details>\n"
)
#: A plain row: its index and token counts (different on every row) and two runs of cells drawn once per
#: table for each combination of their values (`_MIDDLE`, `_END`: a table repeats a few roles, outcomes,
#: fidelities and reasons hundreds of times).
_ROW = '\n  <tr{}><td class="num mono">{}</td>{}<td class="num mono">{}→{}</td>{}</tr>'
_MIDDLE = '<td>{}</td><td>{}{}</td><td><span class="fid fid--{}">{}</span></td>'
_END = '<td class="num mono hide-sm">{}</td><td class="reason mono small">{}</td>'
_PIN_ROW = (
    '\n  <tr class="row-pin{}">\n'
    '    <td class="num mono"><span class="pin-flag" title="pinned block">[PIN]</span> {}{}</td>\n'
    "    <td>{}</td>\n"
    "    <td>{}{}</td>\n"
    '    <td><span class="fid fid--pin">L0</span></td>\n'
    '    <td class="num mono">{}</td>\n'
    '    <td class="num mono hide-sm">{}</td>\n'
    '    <td class="reason">pinned{}</td>\n'
    "  </tr>"
)
_ROW_CHANGED = format_html(' class="{}"', "row-changed")
_NO_COUNT = format_html("{}", "?")


def decision_table_html(rows: Sequence[queries.DecisionRow], esc: Escaper | None = None) -> SafeString:
    """One step's table of per-message decisions (collapsed above 60 rows), [PIN] rows with their pin's
    label and id. Every value is printed as the template's `{{ value }}` printed it (`escaper`, shared by
    the steps of a turn); the markup is the page's (turn.css, turn.js).

    Long because it is the page's inner loop (200 rows a step): the runs of cells a table repeats are
    drawn once each, keyed by their values when those are strings (`decision_rows` makes most of them
    strings; another type is drawn on every row, since `1`, `1.0` and `True` are one dictionary key
    and a JSON object is no key at all)."""
    n = len(rows)
    esc = esc or escaper()
    marks: dict[str, SafeString] = {}
    middles: dict[tuple[Any, ...], SafeString] = {}
    ends: dict[tuple[Any, Any], SafeString] = {}
    parts: list[tuple[SafeString]] = []  # runs of plain rows, one `rows_html` each, between [PIN] rows
    plain: list[tuple[Any, ...]] = []
    for r in rows:
        was = r.changed
        changed = marks.get(was) if type(was) is str else None  # (a mark's key is a str too)
        if changed is None:
            changed = format_html(' <span class="changed">{}</span>', esc(was)) if was else EMPTY
            if type(was) is str:
                marks[was] = changed
        if r.is_pin:
            parts += ((rows_html(_ROW, plain),), (_pin_row(r, changed, esc),))
            plain = []
            continue
        role, outcome, cls, fidelity = r.role, r.outcome, r.cls, r.fidelity
        key = (role, outcome, was, cls, fidelity)
        strings = (
            type(role) is str
            and type(outcome) is str
            and type(was) is str
            and type(cls) is str
            and type(fidelity) is str
        )
        middle = middles.get(key) if strings else None
        if middle is None:
            middle = format_html(_MIDDLE, esc(role), esc(outcome), changed, esc(cls), esc(fidelity))
            if strings:
                middles[key] = middle
        end_key = (r.relevance, r.reason)
        strings = type(r.relevance) is str and type(r.reason) is str
        end = ends.get(end_key) if strings else None
        if end is None:
            end = format_html(_END, esc(r.relevance), esc(r.reason))
            if strings:
                ends[end_key] = end
        plain.append(
            (
                _ROW_CHANGED if was else EMPTY,
                esc(r.index),
                middle,
                _count(r.tokens_before, esc),
                _count(r.tokens_after, esc),
                end,
            )
        )
    parts.append((rows_html(_ROW, plain),))
    return format_html(_TABLE, "open" if n <= 60 else "", n, "" if n == 1 else "s", rows_html("{}", parts))


def _count(value: Any, esc: Escaper) -> SafeString:
    """A token count as the row's "before→after" prints it: "?" when missing, else as written (an int
    through `esc`, which draws small ones once a process; anything else as an f-string's text)."""
    if value is None:
        return _NO_COUNT
    return esc(value if type(value) is int else f"{value}")


def _pin_row(r: queries.DecisionRow, changed: Any, esc: Escaper) -> SafeString:
    index = esc(r.index)
    d: Mapping[str, Any] = r.d
    raw = d.get("raw_index")
    written: Any = ""
    if raw is not None and raw != r.index:
        written = format_html(
            ' <span class="muted small" title="arcana-agent 1.2 writes a synthetic index after the messages; '
            '{} is where the block really was in the working set">(written {})</span>',
            index,
            esc(raw),
        )
    reason: Any = ""
    if r.pin:
        reason = format_html(
            ': <strong>{}</strong> <span class="mono small muted">{}</span>',
            esc(r.pin.label or r.pin.pin_id),
            esc(r.pin.pin_id),
        )
    elif d.get("pin_id"):
        reason = format_html(' <span class="mono small">{}</span>', esc(d.get("pin_id")))
    return format_html(
        _PIN_ROW,
        " row-changed" if r.changed else "",
        index,
        written,
        esc(r.role),
        esc(r.outcome),
        changed,
        esc(r.tokens),
        esc(r.relevance),
        reason,
    )


# ---------------------------------------------------------------------------------------------------
# What changed since the previous step

_CHANGES = '<div class="changes">\n      <h4>What changed since {}</h4>\n      {}\n    </div>'
_NOTHING = format_html(
    '<p class="muted small">{}</p>',
    "Nothing: every message kept the same outcome and the same pins were rendered.",
)
_CHANGES_LIST = (
    '\n      <ul class="changes__list">\n        {}\n        {}\n        {}\n        {}\n        {}\n        {}'
    "\n      </ul>\n      "
)
_CHANGED = '<li><span class="mono">#{}</span> {}: {} → <strong>{}</strong> <span class="muted small">({})</span></li>'


def changes_html(changes: queries.StepChanges, esc: Escaper | None = None) -> SafeString:
    """ "What changed since" the previous step: new and gone messages, the first `CHANGES_LISTED`
    messages whose outcome changed (the others are counted), pins added and gone; values escaped."""
    esc = esc or escaper()
    if changes.empty:
        return format_html(_CHANGES, esc(changes.previous_label), _NOTHING)
    new, gone = changes.new_messages, changes.gone_messages
    body = format_html(
        _CHANGES_LIST,
        format_html("<li><strong>{}</strong> new message{} in the history</li>", new, "" if new == 1 else "s")
        if new
        else "",
        format_html(
            "<li><strong>{}</strong> message{} no longer in the input</li>", gone, "" if gone == 1 else "s"
        )
        if gone
        else "",
        format_html_join(
            "",
            _CHANGED,
            (
                (_key(d, "index", esc), _key(d, "role", esc), esc(before), esc(after), _key(d, "reason", esc))
                for d, before, after in changes.changed[:CHANGES_LISTED]
            ),
        ),
        format_html(
            '<li class="muted">… and {} more, flagged in the table</li>',
            changes.total_changed - CHANGES_LISTED,
        )
        if changes.total_changed > CHANGES_LISTED
        else "",
        format_html_join(
            "", '<li><span class="pin-flag">PIN</span> {} added</li>', ((p,) for p in changes.pins_added)
        ),
        format_html_join(
            "",
            '<li><span class="pin-flag pin-flag--gone">PIN</span> {} gone</li>',
            ((p,) for p in changes.pins_gone),
        ),
    )
    return format_html(_CHANGES, esc(changes.previous_label), body)


def _key(d: Mapping[str, Any], key: str, esc: Escaper) -> Any:
    """`{{ d.key }}` of a decision: "" when the key is missing (the template's unresolved variable)."""
    return esc(d[key]) if key in d else ""
