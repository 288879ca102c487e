"""Part of stage 4 (project), turn by turn: re-project only the turns a batch touches (`do_project_turns`).

Called by `projecting` for a continued run that allows it; the run's counters are `counters`'."""

from __future__ import annotations

import json
import operator
from functools import reduce
from typing import Any

from django.db import connection, models
from django.db.models import Q

from runtime import TraceEvent
from runtime.facts import (
    PinLifetime,
    TurnView,
    build_steps,
    normalize_events,
    pin_lifetimes,
)
from traces.core import prepared
from traces.ingest import reads
from traces.ingest.bulk import id_arrays, insert_projections, update_runs
from traces.ingest.counters import TURN_VALUES, Removed, Tally, update_counters
from traces.ingest.events import local_turn, parse_stored, sort_key
from traces.ingest.projection import Projection, one_turn_event_per_step, pin_row, project_turns
from traces.ingest.reads import Row, consecutive_spans, stored_raw
from traces.models import (
    ContextDecision,
    Event,
    Pin,
    PrimitiveEvent,
    Project,
    Run,
    Step,
    Turn,
)


def do_project_turns(
    project: Project,
    run: Run,
    new: list[TraceEvent],
    *,
    stored: list[Row] | None = None,
    deferred: list[tuple[Run, Projection]] | None = None,
) -> bool:
    """Re-project only the turns of `run` that `new` events touch (they are stored already).

    For a run with `run.incremental` and a batch of our events with turns (`events.is_local_batch`): a turn
    (agent, n) of such a run is a function of its own events and of the `turn` events they name as
    parent, so only the touched turns are recomputed; pins are recomputed per touched agent from its
    pin/unpin calls (and the working sets that rendered a pin with no token count); the run's counters
    are updated from the batch and a few aggregate queries. Gives exactly the rows `project_run` gives
    (tests/traces/ingest/test_ingest_incremental.py). Returns False, having changed nothing that the whole-run
    projection will not replace, when the run leaves the cases this covers; the caller then projects
    it whole. Must run inside the transaction holding the run's lock.

    `stored`: the rows `reads.rows_before_batch` read for a batch that holds `new`, before its rows were
    written; without it, they are read here.

    `deferred`: when given (the batch also holds new runs, whose rows the caller writes), a run with a
    running tally has its new rows and counters appended there instead of written, so they go with
    the new runs' (one COPY per table, and one statement for the ids, the counters and the turn rows
    of the whole batch, instead of a JSON insert of their own). Why: PostgreSQL reads COPY text for
    less CPU than the insert's JSON. For mix (a) of bench/ingest.py (every batch continues a run), in
    one process, four runs alternating with the code before: PostgreSQL's CPU per 50,000 events
    4–12% lower, Python's 2–6% higher (COPY text costs Python more than msgspec's JSON). PostgreSQL
    is the part that every web node shares."""
    touched = _touched_turns(project, run, new, stored)
    if touched is None:
        return False
    dirty, turn_views = touched
    tallied = Tally.load(run) is not None
    if deferred is not None and tallied:
        proj, removed, _ = _replace_turn_rows(project, run, dirty, turn_views, take_ids=False)
        counted = update_counters(project, run, new, proj, removed)
        if counted:
            deferred.append((run, proj))
        return counted  # not counted: the caller's whole-run projection writes the run
    proj, removed, ids = _replace_turn_rows(project, run, dirty, turn_views)
    if not tallied:
        # No running tally yet: the counters are aggregates over the turn rows, the new ones included.
        insert_projections([(run, proj)], ids=ids)
        counted = update_counters(project, run, new, proj, removed)
        if counted:
            update_runs([run])
        return counted
    # Counted from the batch and the deleted rows: on PostgreSQL the counters then go with the new rows
    # (`insert_projections`), whose ids came with the delete.
    counted = update_counters(project, run, new, proj, removed)
    insert_projections([(run, proj)], update=[run] if counted else None, ids=ids)
    return counted


def _touched_turns(
    project: Project, run: Run, new: list[TraceEvent], stored: list[Row] | None = None
) -> tuple[set[tuple[str, int]], list[TurnView]] | None:
    """The (agent, turn) pairs the batch touches and their turn views, rebuilt from the batch and the
    stored events they need; None when the run leaves the cases `do_project_turns` covers. `stored`:
    see `do_project_turns`."""
    rid = run.run_id
    dirty: set[tuple[str, int]] = {(ev.source_agent or "", local_turn(ev)) for ev in new}  # type: ignore[misc]
    new_turn_ids = {ev.step_id for ev in new if ev.event_type == "turn"}
    # The touched turns' events: the batch's from memory, the others parsed from their rows. One
    # query reads the batch's turns and the stored events naming a new turn event as parent (their
    # turn may change: its step's id); a second one only when those are in other turns.
    turns = sorted({t for _, t in dirty})
    if stored is None:
        stored = reads.touched_rows(project, rid, turns, sorted(new_turn_ids))
    for _sid, parent, agent, turn, _raw in stored:
        if parent in new_turn_ids:
            if turn is None:
                return None
            dirty.add((agent, turn))
    more = sorted({t for _, t in dirty} - set(turns))
    if more:
        stored += reads.touched_rows(project, rid, more, [])
    new_ids = {ev.step_id for ev in new}
    loaded = list(new)
    seen: set[str] = set()
    for sid, _parent, agent, turn, raw in stored:
        if (agent, turn) in dirty and sid not in new_ids and sid not in seen:
            seen.add(sid)
            loaded.append(parse_stored(raw))
    have = {ev.step_id for ev in loaded}
    parents = {
        ev.parent_step_id
        for ev in loaded
        if ev.event_type != "turn" and ev.parent_step_id and ev.parent_step_id not in have
    }
    if parents:
        # Turn events of other turns named as parents: normalize_events looks them up (the spine).
        loaded += [parse_stored(raw) for raw in stored_raw(project, rid, sorted(parents), "turn")]
    turn_views = [
        tv
        for tv in build_steps(normalize_events(sorted(loaded, key=sort_key)))
        if (tv.agent or "", tv.turn) in dirty
    ]
    if not one_turn_event_per_step(turn_views):
        return None
    return dirty, turn_views


def _replace_turn_rows(
    project: Project,
    run: Run,
    dirty: set[tuple[str, int]],
    turn_views: list[TurnView],
    *,
    take_ids: bool = True,
) -> tuple[Projection, Removed, list[list[int]] | None]:
    """Project the touched turns and delete their rows (and the touched agents' pins when a pin may
    have changed); the caller inserts the new ones. Returns the new rows, what the deleted turn and
    step rows held, and (PostgreSQL, with `take_ids`) the ids of the new turn and step rows, taken by
    the delete."""
    proj, _ = project_turns(turn_views)
    by_agent: dict[str, list[int]] = {}
    for agent, turn in sorted(dirty):
        by_agent.setdefault(agent, []).append(turn)
    # One term per agent (not per turn): Django's cost of building a Q grows with its terms.
    in_dirty = reduce(operator.or_, (Q(agent=a, turn_number__in=ts) for a, ts in by_agent.items()))
    # Pins are a function of pin/unpin calls and of working sets that rendered a pin. When the touched
    # turns hold none (all their events are in `loaded`), the agents' pin rows cannot change: skip them.
    pin_agents: set[str] = set()
    if any(d["pinned_count"] for _, d in proj.decisions) or any(
        p["primitive"] in ("pin", "unpin") for _, p in proj.primitives
    ):
        pin_agents = {a for a, _ in dirty}
        proj.pins = _project_pins(project, run, pin_agents, in_dirty, turn_views)
    wanted: list[tuple[type[models.Model], int]] = (
        [(Turn, len(proj.turns)), (Step, len(proj.steps))] if take_ids else []
    )
    removed, ids = _delete_turns(run, by_agent, in_dirty, pin_agents, wanted)
    return proj, removed, ids if take_ids else None


def _delete_turns(
    run: Run,
    by_agent: dict[str, list[int]],
    in_dirty: Q,
    pin_agents: set[str],
    new_ids: list[tuple[type[models.Model], int]],
) -> tuple[Removed, list[list[int]] | None]:
    """Delete the projection rows of the touched turns (`by_agent`: agent → turn numbers) and the pins of
    `pin_agents`; returns what the deleted turn and step rows held, and the ids `new_ids` asks for
    (model, how many). PostgreSQL: one statement (data-modifying CTEs, the deleted values RETURNING;
    projection rows carry no foreign-key constraint, so children and parents may go together; the
    new ids from the sequences in its select list). Elsewhere: a read of those values, then a DELETE
    per table, and no ids (the inserts take them)."""
    removed = Removed()
    if connection.vendor == "postgresql":
        qn = connection.ops.quote_name
        # Every column of the (run, agent, turn) indexes in the condition, so a delete reads the touched
        # turns' rows only, whatever the planner believes of the table (an IN over unnest() pairs was
        # planned as a scan of the whole run's rows, and a live stream's batches grew with the run).
        spans = [(a, lo, hi) for a in sorted(by_agent) for lo, hi in consecutive_spans(sorted(by_agent[a]))]
        touched = " OR ".join(["(agent = %s AND {col} BETWEEN %s AND %s)"] * len(spans))
        touched_params = [v for span in spans for v in span]
        parts: list[str] = []
        params: list[Any] = []
        for model, col, back in ((ContextDecision, "turn_number", ""), (PrimitiveEvent, "turn_number", ""), (Step, "turn_number", " RETURNING model"), (Turn, "number", f" RETURNING {', '.join(TURN_VALUES)}")):  # fmt: skip
            parts.append(
                f"DELETE FROM {qn(model._meta.db_table)} WHERE run_id = %s AND ({touched.format(col=col)}){back}"
            )
            params += [run.pk, *touched_params]
        if pin_agents:
            parts.append(
                f"DELETE FROM {qn(Pin._meta.db_table)} WHERE run_id = %s AND agent = ANY(%s::text[])"
            )
            params += [run.pk, sorted(pin_agents)]
        arrays, array_params = id_arrays(new_ids)
        selected = [
            "(SELECT json_agg(model) FROM d2 WHERE model <> '')",
            f"(SELECT json_agg(json_build_array({', '.join(TURN_VALUES)})) FROM d3)",
            *arrays,
        ]
        sql = (
            "WITH "
            + ", ".join(f"d{i} AS ({p})" for i, p in enumerate(parts))
            + " SELECT "
            + ", ".join(selected)
        )
        with prepared.cursor() as cursor:
            cursor.execute(sql, params + array_params)
            step_models, values, *ids = cursor.fetchone()
        step_models, values = (json.loads(v) if isinstance(v, str) else v for v in (step_models, values))
        removed.models.update(step_models or [])
        for row in values or []:
            removed.add_turn(dict(zip(TURN_VALUES, row, strict=True)))
        return removed, [list(i) for i in ids]
    dirty_turns = Turn.objects.filter(run=run).filter(
        reduce(operator.or_, (Q(agent=a, number__in=ts) for a, ts in by_agent.items()))
    )
    removed.models.update(
        m for m in Step.objects.filter(run=run).filter(in_dirty).values_list("model", flat=True) if m
    )
    for values in dirty_turns.values(*TURN_VALUES):
        removed.add_turn(values)
    for m in (ContextDecision, PrimitiveEvent, Step):
        qs = m.objects.filter(run=run).filter(in_dirty)
        qs._raw_delete(qs.db)
    dirty_turns._raw_delete(dirty_turns.db)
    if pin_agents:
        dirty_pins = Pin.objects.filter(run=run, agent__in=pin_agents)
        dirty_pins._raw_delete(dirty_pins.db)
    return removed, None


#: The values of a turn row the run's running totals need.


def _project_pins(
    project: Project, run: Run, agents: set[str], in_dirty: Q, dirty_views: list[TurnView]
) -> list[dict[str, Any]]:
    """The pin rows of `agents` (all their pins): `pin_lifetimes` over the touched turns' views and, for
    the other turns, their stored pin/unpin calls (and, only when a pin has no token count, the
    working sets that rendered a pin)."""
    ids = list(
        PrimitiveEvent.objects.filter(run=run, agent__in=agents, primitive__in=("pin", "unpin"))
        .exclude(in_dirty)
        .values_list("event_step_id", flat=True)
    )
    stored = [parse_stored(raw) for raw in stored_raw(project, run.run_id, sorted(set(ids)))]
    mine = [tv for tv in dirty_views if (tv.agent or "") in agents]

    def lifetimes(extra: list[TraceEvent]) -> list[PinLifetime]:
        views = build_steps(normalize_events(sorted(extra, key=sort_key))) + mine
        views.sort(key=lambda tv: (tv.agent or "", tv.turn))
        return pin_lifetimes(views)

    pins = lifetimes(stored)
    if any(p.tokens is None for p in pins):
        rendered = set(
            ContextDecision.objects.filter(run=run, agent__in=agents, pinned_count__gt=0)
            .exclude(in_dirty)
            .values_list("agent", "turn_number")
        )
        if rendered:
            events = Event.objects.filter(project=project, run_id=run.run_id)
            stored += [
                parse_stored(raw)
                for agent, turn, raw in events.filter(
                    event_type="context_decision", turn__in=sorted({t for _, t in rendered})
                ).values_list("agent", "turn", "raw")
                if (agent, turn) in rendered
            ]
            pins = lifetimes(stored)
    return [pin_row(p) for p in pins]
