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

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from django.core.cache import cache
from django.utils.safestring import SafeString, mark_safe

from traces.models import ContextDecision, Pin, PrimitiveEvent, Run, Step, Turn, unpack_message_decisions
from traces.runs import queries
from traces.runs.run_page import text

#: Bumped when the parts' shape or the table's markup changes, so older cached parts are not read.
TURN_CACHE_VERSION = 1

TURN_CACHE_SECONDS = 3600

#: "What changed" lists this many messages; the rest are counted and flagged in the table.
CHANGES_LISTED = 30


@dataclass
class StepPart:
    step: Step
    decision: ContextDecision | None
    table: SafeString  # the decision table (`decision_table_html`), "" without a decision
    changes: queries.StepChanges | None
    changes_html: SafeString  # "what changed", rendered (`changes_html`), "" for the first step of a run
    primitives: list[tuple[PrimitiveEvent, str]]  # (call, its one-line summary)
    snapshot: dict[str, Any] | None


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
        for t in Turn.objects.filter(run=run, agent=agent, number__in=[number - 1, number, number + 1])
    }
    turn = near.get(number)
    if turn is None:
        return None
    steps = list(Step.objects.filter(turn=turn).select_related("decision").order_by("number"))
    pins = list(Pin.objects.filter(run=run, agent=agent).order_by("created_turn", "created_step", "id"))
    primitives = list(
        PrimitiveEvent.objects.filter(run=run, agent=agent, turn_number=number).order_by("timestamp", "id")
    )
    # The step before this turn's first step, for "what changed" on step 1.
    previous = (
        ContextDecision.objects.filter(run=run, agent=agent, turn_number__lt=number)
        .order_by("-turn_number", "-step_number")
        .values_list("turn_number", "step_number", "message_table")
        .first()
    )
    prev_label = f"turn {previous[0]} step {previous[1]}" if previous else ""
    prev_mds = unpack_message_decisions(previous[2]) if previous else None
    prev_turn = previous[0] if previous else 0
    summaries = [(ev, queries.primitive_summary(ev)) for ev in primitives]
    out = []
    for step in steps:
        decision = getattr(step, "decision", None)
        table, changes, listed = SafeString(""), None, SafeString("")
        if decision is not None:
            mds = decision.message_decisions
            table = decision_table_html(queries.decision_rows(mds, prev_mds, pins, number))
            changes = queries.step_changes(mds, prev_mds, prev_label, pins, number, prev_turn)
            if changes is not None:
                changes = _listed(changes)
                listed = changes_html(changes)
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


_HEAD = (
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
    "  <tbody>\n  "
)
_ROW_CHANGED = ' class="row-changed"'
_TAIL = "\n  </tbody>\n</table>\n</div>\n</details>\n"


def decision_table_html(rows: Sequence[queries.DecisionRow]) -> SafeString:
    """One step's table of per-message decisions (collapsed above 60 rows), [PIN] rows with their pin's
    label and id. Every value is escaped (`text`, as on the run page); the markup is the page's
    (turn.css, turn.js)."""
    n = len(rows)
    parts = [
        '<details class="collapse decisions" ' + ("open" if n <= 60 else "") + ">\n"
        '<summary><strong>Per-message decisions</strong> <span class="muted small">'
        + f"{n} row{'' if n == 1 else 's'}</span></summary>\n",
        _HEAD,
    ]
    add = parts.append
    for r in rows:
        changed = f' <span class="changed">{text(r.changed)}</span>' if r.changed else ""
        if r.is_pin:
            add(_pin_row(r, changed))
        else:
            add(
                f'\n  <tr{_ROW_CHANGED if r.changed else ""}><td class="num mono">{text(r.index)}</td>'
                f"<td>{text(r.role)}</td><td>{text(r.outcome)}{changed}</td>"
                f'<td><span class="fid fid--{text(r.cls)}">{text(r.fidelity)}</span></td>'
                f'<td class="num mono">{text(r.tokens)}</td><td class="num mono hide-sm">{text(r.relevance)}</td>'
                f'<td class="reason mono small">{text(r.reason)}</td></tr>'
            )
    add(_TAIL)
    return mark_safe("".join(parts))  # noqa: S308 (every value above went through text)


def _pin_row(r: queries.DecisionRow, changed: str) -> str:
    index = text(r.index)
    d: Mapping[str, Any] = r.d
    raw = d.get("raw_index")
    written = ""
    if raw is not None and raw != r.index:
        written = (
            ' <span class="muted small" title="arcana-agent 1.2 writes a synthetic index after the messages; '
            f'{index} is where the block really was in the working set">(written {text(raw)})</span>'
        )
    if r.pin:
        reason = (
            f": <strong>{text(r.pin.label or r.pin.pin_id)}</strong>"
            f' <span class="mono small muted">{text(r.pin.pin_id)}</span>'
        )
    elif d.get("pin_id"):
        reason = f' <span class="mono small">{text(d.get("pin_id"))}</span>'
    else:
        reason = ""
    return (
        '\n  <tr class="row-pin' + (" row-changed" if r.changed else "") + '">\n'
        f'    <td class="num mono"><span class="pin-flag" title="pinned block">[PIN]</span> {index}{written}</td>\n'
        f"    <td>{text(r.role)}</td>\n"
        f"    <td>{text(r.outcome)}{changed}</td>\n"
        '    <td><span class="fid fid--pin">L0</span></td>\n'
        f'    <td class="num mono">{text(r.tokens)}</td>\n'
        f'    <td class="num mono hide-sm">{text(r.relevance)}</td>\n'
        f'    <td class="reason">pinned{reason}</td>\n'
        "  </tr>"
    )


def _key_text(d: Mapping[str, Any], key: str) -> str:
    """`{{ d.key }}` of a decision: "" when the key is missing (the template's unresolved variable)."""
    return text(d[key]) if key in d else ""


def _count_item(n: int, text: str) -> str:
    return f"<li><strong>{n}</strong> {text}</li>" if n else ""


def changes_html(changes: queries.StepChanges) -> SafeString:
    """ "What changed since" the previous step: new and gone messages, the first `CHANGES_LISTED`
    messages whose outcome changed (the others are counted), pins added and gone; values escaped."""
    head = f'<div class="changes">\n      <h4>What changed since {text(changes.previous_label)}</h4>\n      '
    if changes.empty:
        body = (
            '<p class="muted small">Nothing: every message kept the same outcome and the same pins were '
            "rendered.</p>"
        )
    else:
        new, gone = changes.new_messages, changes.gone_messages
        items = "".join(
            f'<li><span class="mono">#{_key_text(d, "index")}</span> {_key_text(d, "role")}: {text(before)} → '
            f'<strong>{text(after)}</strong> <span class="muted small">({_key_text(d, "reason")})</span></li>'
            for d, before, after in changes.changed[:CHANGES_LISTED]
        )
        more = (
            f'<li class="muted">… and {changes.total_changed - CHANGES_LISTED} more, flagged in the table</li>'
            if changes.total_changed > CHANGES_LISTED
            else ""
        )
        lines = [
            _count_item(new, f"new message{'' if new == 1 else 's'} in the history"),
            _count_item(gone, f"message{'' if gone == 1 else 's'} no longer in the input"),
            items,
            more,
            "".join(
                f'<li><span class="pin-flag">PIN</span> {text(p)} added</li>' for p in changes.pins_added
            ),
            "".join(
                f'<li><span class="pin-flag pin-flag--gone">PIN</span> {text(p)} gone</li>'
                for p in changes.pins_gone
            ),
        ]
        body = (
            '\n      <ul class="changes__list">\n        '
            + "\n        ".join(lines)
            + "\n      </ul>\n      "
        )
    return mark_safe(head + body + "\n    </div>")  # noqa: S308 (every value above went through text)
