"""Turn-by-turn projection: re-project only the turns a batch touches (`do_project_turns`)."""

from __future__ import annotations

import json
import operator
from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import reduce
from typing import Any

from django.db import connection, models
from django.db.models import Max, Q
from django.utils import timezone

from runtime import TraceEvent
from runtime.facts import (
    CANCELLED_STOP,
    PinLifetime,
    RunLabels,
    TurnView,
    build_steps,
    normalize_events,
    pin_lifetimes,
    run_labels,
    status_from_last,
)
from traces.core import prepared
from traces.ingest.bulk import _insert_projections, _update_runs, id_arrays
from traces.ingest.projection import (
    _one_turn_event_per_step,
    _parse_stored,
    _pin_row,
    _project_turns,
    _Projection,
    _sort_key,
    _top_model,
    local_turn,
    primitive_counts,
)
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
    stored: list[_Row] | None = None,
    deferred: list[tuple[Run, _Projection]] | None = None,
) -> bool:
    """Re-project only the turns of `run` that `new` events touch (they are stored already).

    For a run with `run.incremental` and a batch of our events with turns (`_batch_is_local`): a turn
    (agent, n) of such a run is a function of its own events and of the `turn` events they name as
    parent, so only the touched turns are recomputed; pins are recomputed per touched agent from its
    pin/unpin calls (and the working sets that rendered a pin with no token count); the run's counters
    are updated from the batch and a few aggregate queries. Gives exactly the rows `project_run` gives
    (tests/traces/test_ingest_incremental.py). Returns False, having changed nothing that the whole-run
    projection will not replace, when the run leaves the cases this covers; the caller then projects
    it whole. Must run inside the transaction holding the run's lock.

    `stored`: the rows `rows_before_batch` read for a batch that holds `new`, before its rows were
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
    tallied = _Tally.load(run) is not None
    if deferred is not None and tallied:
        proj, removed, _ = _replace_turn_rows(project, run, dirty, turn_views, take_ids=False)
        counted = _update_counters(project, run, new, proj, removed)
        if counted:
            deferred.append((run, proj))
        return counted  # not counted: the caller's whole-run projection writes the run
    proj, removed, ids = _replace_turn_rows(project, run, dirty, turn_views)
    if not tallied:
        # No running tally yet: the counters are aggregates over the turn rows, the new ones included.
        _insert_projections([(run, proj)], ids=ids)
        counted = _update_counters(project, run, new, proj, removed)
        if counted:
            _update_runs([run])
        return counted
    # Counted from the batch and the deleted rows: on PostgreSQL the counters then go with the new rows
    # (`_insert_projections`), whose ids came with the delete.
    counted = _update_counters(project, run, new, proj, removed)
    _insert_projections([(run, proj)], update=[run] if counted else None, ids=ids)
    return counted


#: A stored event as `_touched_rows` reads it: (step_id, parent_step_id, agent, turn, raw).
_Row = tuple[str, str | None, str, int | None, str]


def rows_before_batch(project: Project, run: Run, batch: list[TraceEvent]) -> list[_Row]:
    """The stored rows `do_project_turns` reads for any part of `batch` (the run's events of a batch),
    read before the batch's rows are written.

    Why before: read after, they also hold the batch's own rows, twice over (once by turn, once by
    parent), raw text included, only to be skipped. A batch's events that turn out to be duplicates
    only widen the read: `_touched_turns` keeps the rows of the turns the new events touch."""
    turns = sorted({t for ev in batch if (t := local_turn(ev)) is not None})
    return _touched_rows(
        project, run.run_id, turns, sorted({ev.step_id for ev in batch if ev.event_type == "turn"})
    )


def _touched_turns(
    project: Project, run: Run, new: list[TraceEvent], stored: list[_Row] | None = None
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
        stored = _touched_rows(project, rid, turns, sorted(new_turn_ids))
    for _sid, parent, agent, turn, _raw in stored:
        if parent in new_turn_ids:
            if turn is None:
                return None
            dirty.add((agent, turn))
    more = sorted({t for _, t in dirty} - set(turns))
    if more:
        stored += _touched_rows(project, rid, more, [])
    new_ids = {ev.step_id for ev in new}
    loaded = list(new)
    seen: set[str] = set()
    for sid, _parent, agent, turn, raw in stored:
        if (agent, turn) in dirty and sid not in new_ids and sid not in seen:
            seen.add(sid)
            loaded.append(_parse_stored(raw))
    have = {ev.step_id for ev in loaded}
    parents = {
        ev.parent_step_id
        for ev in loaded
        if ev.event_type != "turn" and ev.parent_step_id and ev.parent_step_id not in have
    }
    if parents:
        # Turn events of other turns named as parents: normalize_events looks them up (the spine).
        loaded += [_parse_stored(raw) for raw in _stored_raw(project, rid, sorted(parents), "turn")]
    turn_views = [
        tv
        for tv in build_steps(normalize_events(sorted(loaded, key=_sort_key)))
        if (tv.agent or "", tv.turn) in dirty
    ]
    if not _one_turn_event_per_step(turn_views):
        return None
    return dirty, turn_views


def _replace_turn_rows(
    project: Project,
    run: Run,
    dirty: set[tuple[str, int]],
    turn_views: list[TurnView],
    *,
    take_ids: bool = True,
) -> tuple[_Projection, _Removed, list[list[int]] | None]:
    """Project the touched turns and delete their rows (and the touched agents' pins when a pin may
    have changed); the caller inserts the new ones. Returns the new rows, what the deleted turn and
    step rows held, and (PostgreSQL, with `take_ids`) the ids of the new turn and step rows, taken by
    the delete."""
    proj, _ = _project_turns(turn_views)
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


def _update_counters(
    project: Project, run: Run, new: list[TraceEvent], proj: _Projection, removed: _Removed
) -> bool:
    """The run's counters after the batch. With a valid `Run.tally`, each is the stored value plus
    what the batch added minus what the replaced rows held (no read of the rest of the run); without
    one (the first batch after a whole-run projection), the aggregates of `_run_summary`, which then
    start the tally. False when a whole-run fact is at stake (the caller then projects the run whole)."""
    tally = _Tally.load(run)
    if tally is None:
        new_turns = [ev for ev in new if ev.event_type == "turn"]
        summary = _run_summary(
            project, run, max(new, key=_sort_key), max(new_turns, key=_sort_key) if new_turns else None
        )
        tally = _Tally.of(summary)
        agg = summary.turns
        totals = {k: agg[k] or 0 for k in _SUMS}
        turns, peak = agg["turns"], agg["peak_utilization"]
    else:
        tally.add(new, proj, removed)
        totals = {k: getattr(run, k) + sum(t[k] for t in proj.turns) - removed.sums[k] for k in _SUMS}
        turns = run.turns + len(proj.turns) - removed.turns
        peak = _peak_after(run, proj, removed)
    # The run's model: the most used over all steps (a tie is left to the whole-run projection, which
    # breaks it by step order).
    model = _top_model(tally.models)
    if model is None:
        return False  # the rows written above are replaced by the caller's whole-run projection
    by_primitive = primitive_counts(new)
    stamps = [ev.timestamp_dt for ev in new]
    run.agents = sorted(set(run.agents) | {a for ev in new if (a := ev.source_agent)})
    run.model = model[:200]
    run.status = tally.status()
    if run.status in (Run.Status.FAILED, Run.Status.CANCELLED):
        return False  # the reason of a failed or cancelled run is a whole-run fact (`run_outcome`)
    if any(
        ("run_name" in ev.metadata or "run_tags" in ev.metadata)
        and run_labels([ev]) != RunLabels(run.name, list(run.tags or []))
        for ev in new
    ):
        return False  # a run's name and tags are its first event's (`runtime.facts.run_labels`)
    for key, value in (("bundle_id", run.bundle_id), ("delegated_by_run_id", run.delegated_by_run_id)):
        if any(ev.metadata.get(key, value or None) != (value or None) for ev in new):
            return False  # a run's links are its first event's (`runtime.facts.run_links`): whole run
    run.started_at = min([*stamps, run.started_at] if run.started_at else stamps)
    run.ended_at = max([*stamps, run.ended_at] if run.ended_at else stamps)
    if not totals["steps"]:
        return False  # no step at all: the whole-run projection decides the status (see `Run`)
    run.turns = turns
    for name, total in totals.items():
        setattr(run, name, total)  # `errors` too: every event of such a run belongs to a turn
    run.events += len(new)
    run.primitives += sum(by_primitive.values())
    run.recall_count += by_primitive.get("recall", 0)
    run.pin_count += by_primitive.get("pin", 0)
    run.unpin_count += by_primitive.get("unpin", 0)
    run.peak_utilization = peak
    run.updated_at = timezone.now()
    run.tally = tally.dump(run.updated_at)
    return True


#: The run's counters that are sums over its turn rows.
_SUMS = ("steps", "prompt_tokens", "completion_tokens", "tokens", "tool_calls", "errors")


def _peak_after(run: Run, proj: _Projection, removed: _Removed) -> float | None:
    """The run's peak utilization after the touched turns are replaced: the stored peak and the new
    rows' peaks, unless a replaced row held the stored peak and no new row reaches it (then the other
    rows' peak is read: one query, only in that case)."""
    added = [p for t in proj.turns if (p := t["peak_utilization"]) is not None]
    top = max(added) if added else None
    stored = run.peak_utilization
    if stored is None or (top is not None and top >= stored):
        return top if top is not None else stored
    if stored in removed.peaks:
        # The rows left after the delete (the new ones are not inserted yet), and the new ones.
        left = Turn.objects.filter(run=run).aggregate(m=Max("peak_utilization"))["m"]
        return max((p for p in (left, top) if p is not None), default=None)
    return stored


@dataclass
class _Removed:
    """What the replaced turn and step rows of a batch held (to take out of the run's running totals)."""

    turns: int = 0
    sums: dict[str, int] = field(default_factory=lambda: dict.fromkeys(_SUMS, 0))
    peaks: set[float] = field(default_factory=set)
    models: Counter[str] = field(default_factory=Counter)

    def add_turn(self, values: dict[str, Any]) -> None:
        self.turns += 1
        for k in _SUMS:
            self.sums[k] += values[k]
        if values["peak_utilization"] is not None:
            self.peaks.add(values["peak_utilization"])


def whole_run_tally(events: list[TraceEvent], proj: _Projection, at: datetime) -> dict[str, Any] | None:
    """`Run.tally` of a run projected whole from all its `events` (valid while its `updated_at` is
    `at`): the run's next live batch then counts from it, instead of aggregating the run's rows first
    (a run of mix (a) spans two batches: its second one did)."""
    if not events:
        return None
    last = max(events, key=_sort_key)
    turns = [ev for ev in events if ev.event_type == "turn"]
    lt = max(turns, key=_sort_key) if turns else None
    return _Tally.starting(Counter(m for _, step in proj.steps if (m := step["model"])), last, lt).dump(at)


def _last_entry(ev: TraceEvent) -> tuple[datetime, str, bool | str]:
    """`_Tally.last` for the run's last event: its sort key and its stop reason (False without one;
    tallies stored before it was kept hold True)."""
    return (ev.timestamp_dt, ev.step_id, ev.stop_reason or False)


def _turn_entry(ev: TraceEvent) -> tuple[datetime, str, str]:
    """`_Tally.last_turn` for the run's last `turn` event: its sort key and its answer."""
    return (ev.timestamp_dt, ev.step_id, _answer(ev))


def _answer(turn_event: TraceEvent) -> str:
    """What a `turn` event's answer says of the run's status (`status_from_last` without the last
    event's stop reason): "failed", "completed" or "running"."""
    return status_from_last(replace(turn_event, stop_reason=None), turn_event)


@dataclass
class _Tally:
    """`Run.tally` in memory: the steps per model over the run, and the run's last event and last `turn`
    event as their sort key (`_sort_key`) and what `status_from_last` reads of them (the last event's
    stop reason; the last turn's answer, `_answer`)."""

    models: Counter[str]
    last: tuple[datetime, str, bool | str]
    last_turn: tuple[datetime, str, str] | None

    @classmethod
    def load(cls, run: Run) -> _Tally | None:
        """The run's stored tally; None when there is none or a whole-run projection came after it."""
        t = run.tally
        if not isinstance(t, dict) or datetime.fromisoformat(t["at"]) != run.updated_at:
            return None
        lt = t["last_turn"]
        return cls(
            Counter(t["models"]),
            (datetime.fromisoformat(t["last"][0]), t["last"][1], t["last"][2]),
            (datetime.fromisoformat(lt[0]), lt[1], lt[2]) if lt else None,
        )

    @classmethod
    def of(cls, summary: _RunSummary) -> _Tally:
        return cls.starting(Counter(summary.models), summary.last, summary.last_turn)

    @classmethod
    def starting(cls, models: Counter[str], last: TraceEvent, last_turn: TraceEvent | None) -> _Tally:
        """The tally of a run whose steps per model, last event and last `turn` event are these."""
        return cls(models, _last_entry(last), _turn_entry(last_turn) if last_turn is not None else None)

    def add(self, new: list[TraceEvent], proj: _Projection, removed: _Removed) -> None:
        """Take the batch in: its steps' models (less the replaced steps'), its last events."""
        self.models.update(m for _, step in proj.steps if (m := step["model"]))
        self.models.subtract(removed.models)
        self.models = +self.models  # drop models no step uses any more
        last = max(new, key=_sort_key)
        if _sort_key(last) > self.last[:2]:
            self.last = _last_entry(last)
        turns = [ev for ev in new if ev.event_type == "turn"]
        if turns:
            lt = max(turns, key=_sort_key)
            if self.last_turn is None or _sort_key(lt) > self.last_turn[:2]:
                self.last_turn = _turn_entry(lt)

    def status(self) -> str:
        """`status_from_last` of the run's last event and last `turn` event."""
        if self.last[2] == CANCELLED_STOP:
            return Run.Status.CANCELLED
        answer = self.last_turn[2] if self.last_turn is not None else Run.Status.RUNNING
        if answer == Run.Status.FAILED:
            return Run.Status.FAILED
        if answer == Run.Status.COMPLETED or self.last[2]:
            return Run.Status.COMPLETED
        return Run.Status.RUNNING

    def dump(self, at: datetime) -> dict[str, Any]:
        """The JSON of `Run.tally`, valid while the run's `updated_at` is `at`."""
        lt = self.last_turn
        return {
            "at": at.isoformat(),
            "models": dict(self.models),
            "last": [self.last[0].isoformat(), self.last[1], self.last[2]],
            "last_turn": [lt[0].isoformat(), lt[1], lt[2]] if lt is not None else None,
        }


def _touched_rows(project: Project, run_id: str, turns: list[int], parents: list[str]) -> list[_Row]:
    """(step_id, parent_step_id, agent, turn, raw) of the run's stored events in `turns` or whose parent
    is one of `parents` (an event may come twice): one query, in SQL (building it with the ORM cost a
    live batch more than running it).

    PostgreSQL: one statement of one shape whatever the batch, prepared once per connection and planned
    once: per run of consecutive turns and per parent, an index look-up of its own (a `LATERAL`
    subquery kept apart by `OFFSET 0`), a plain equality or range on every column of its (partial)
    index. The arrays are sub-selects so that no plan knows their length: the generic plan then costs
    what a batch's own would, and PostgreSQL keeps it instead of planning every batch again.

    Why look-ups of one index each: a live run's rows are newer than the table's statistics, so the
    planner believes the run holds one row; it then scans the whole run through any index on (project,
    run_id), filtering, for an `OR`, an `IN` list or a condition the index does not cover (a cost
    growing with the run). Each look-up here is served by one index."""
    if not turns and not parents:
        return []
    qn = connection.ops.quote_name
    table = qn(Event._meta.db_table)
    cols = f"SELECT step_id, parent_step_id, agent, {qn('turn')}, raw FROM {table}"
    params: list[Any]
    if connection.vendor == "postgresql":
        ranges = _ranges(turns)
        sql = (
            f"SELECT e.* FROM unnest((SELECT %s::bigint[]), (SELECT %s::bigint[])) AS r(lo, hi) CROSS JOIN LATERAL "
            f"({cols} WHERE project_id = %s AND run_id = %s AND {qn('turn')} BETWEEN r.lo AND r.hi OFFSET 0) e "
            f"UNION ALL SELECT e.* FROM unnest((SELECT %s::text[])) AS p(parent) CROSS JOIN LATERAL "
            f"({cols} WHERE project_id = %s AND run_id = %s AND parent_step_id = p.parent OFFSET 0) e"
        )  # noqa: S608  (names are ours; values are parameters)
        params = [[lo for lo, _ in ranges], [hi for _, hi in ranges], project.pk, run_id]
        params += [parents, project.pk, run_id]
    else:
        where = [f"{qn('turn')} IN ({', '.join(['%s'] * len(turns))})"] if turns else []
        if parents:
            where.append(f"parent_step_id IN ({', '.join(['%s'] * len(parents))})")
        sql = f"{cols} WHERE project_id = %s AND run_id = %s AND ({' OR '.join(where)})"
        params = [project.pk, run_id, *turns, *parents]
    with prepared.cursor() as cursor:
        cursor.execute(sql, params)  # noqa: S608  (names are ours; values are parameters)
        return list(cursor.fetchall())


def _stored_raw(
    project: Project, run_id: str, step_ids: list[str], event_type: str | None = None
) -> list[str]:
    """The raw text of the run's stored events among `step_ids` (of `event_type` only, when given): one
    query. PostgreSQL: a UNION ALL of unique-key look-ups (an `IN` list, with a live run's stale
    statistics, is planned as a scan of the run filtered by the list; see `_touched_rows`)."""
    if not step_ids:
        return []
    qn = connection.ops.quote_name
    one = f"SELECT raw FROM {qn(Event._meta.db_table)} WHERE project_id = %s AND run_id = %s AND "
    of_type = " AND event_type = %s" if event_type is not None else ""
    typed = [event_type] if event_type is not None else []
    if connection.vendor == "postgresql":
        sql = " UNION ALL ".join([f"{one}step_id = %s{of_type}"] * len(step_ids))
        params: list[Any] = [v for sid in step_ids for v in (project.pk, run_id, sid, *typed)]
    else:
        sql = f"{one}step_id IN ({', '.join(['%s'] * len(step_ids))}){of_type}"
        params = [project.pk, run_id, *step_ids, *typed]
    with prepared.cursor() as cursor:
        cursor.execute(sql, params)  # noqa: S608  (names are ours; values are parameters)
        return [raw for (raw,) in cursor.fetchall()]


def _ranges(numbers: list[int]) -> list[tuple[int, int]]:
    """Sorted distinct `numbers` as runs of consecutive values: [1, 2, 3, 7] → [(1, 3), (7, 7)]."""
    out: list[tuple[int, int]] = []
    for n in numbers:
        if out and n == out[-1][1] + 1:
            out[-1] = (out[-1][0], n)
        elif not out or n > out[-1][1]:
            out.append((n, n))
    return out


def _delete_turns(
    run: Run,
    by_agent: dict[str, list[int]],
    in_dirty: Q,
    pin_agents: set[str],
    new_ids: list[tuple[type[models.Model], int]],
) -> tuple[_Removed, list[list[int]] | None]:
    """Delete the projection rows of the touched turns (`by_agent`: agent → turn numbers) and the pins of
    `pin_agents`; returns what the deleted turn and step rows held, and the ids `new_ids` asks for
    (model, how many). PostgreSQL: one statement (data-modifying CTEs, the deleted values RETURNING;
    projection rows carry no foreign-key constraint, so children and parents may go together; the
    new ids from the sequences in its select list). Elsewhere: a read of those values, then a DELETE
    per table, and no ids (the inserts take them)."""
    removed = _Removed()
    if connection.vendor == "postgresql":
        qn = connection.ops.quote_name
        # Every column of the (run, agent, turn) indexes in the condition, so a delete reads the touched
        # turns' rows only, whatever the planner believes of the table (an IN over unnest() pairs was
        # planned as a scan of the whole run's rows, and a live stream's batches grew with the run).
        spans = [(a, lo, hi) for a in sorted(by_agent) for lo, hi in _ranges(sorted(by_agent[a]))]
        touched = " OR ".join(["(agent = %s AND {col} BETWEEN %s AND %s)"] * len(spans))
        touched_params = [v for span in spans for v in span]
        parts: list[str] = []
        params: list[Any] = []
        for model, col, back in ((ContextDecision, "turn_number", ""), (PrimitiveEvent, "turn_number", ""), (Step, "turn_number", " RETURNING model"), (Turn, "number", f" RETURNING {', '.join(_TURN_VALUES)}")):  # fmt: skip
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
            f"(SELECT json_agg(json_build_array({', '.join(_TURN_VALUES)})) FROM d3)",
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
            removed.add_turn(dict(zip(_TURN_VALUES, row, strict=True)))
        return removed, [list(i) for i in ids]
    dirty_turns = Turn.objects.filter(run=run).filter(
        reduce(operator.or_, (Q(agent=a, number__in=ts) for a, ts in by_agent.items()))
    )
    removed.models.update(
        m for m in Step.objects.filter(run=run).filter(in_dirty).values_list("model", flat=True) if m
    )
    for values in dirty_turns.values(*_TURN_VALUES):
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
_TURN_VALUES = (*_SUMS, "peak_utilization")


@dataclass
class _RunSummary:
    models: Counter[str]  # steps per non-empty model, over the whole run
    turns: dict[
        str, Any
    ]  # turns, steps, prompt/completion/total tokens, peak_utilization, tool_calls, errors
    last: TraceEvent  # the run's last event (`_sort_key`)
    last_turn: TraceEvent | None  # its last `turn` event


def _run_summary(
    project: Project, run: Run, last_new: TraceEvent, last_new_turn: TraceEvent | None
) -> _RunSummary:
    """The whole-run facts the turn-by-turn path needs after writing, in ONE query (a UNION ALL): the
    steps per model, the sums over the turns, and the candidates for the last event and the last `turn`
    event — the stored events at or after the batch's last (turn) event, which bounds the search; with
    no `turn` event in the batch, the `turn` events at the latest `turn` timestamp. Ties on the
    timestamp are broken in Python, as `project_run` does (the database's collation may order step ids
    differently)."""
    qn = connection.ops.quote_name
    step_t, turn_t, event_t = (qn(m._meta.db_table) for m in (Step, Turn, Event))
    nul = "CAST(NULL AS bigint)"
    in_run = "project_id = %s AND run_id = %s"
    at = connection.ops.adapt_datetimefield_value
    turn_params: list[Any]
    if last_new_turn is not None:
        turn_where, turn_params = "timestamp >= %s", [at(last_new_turn.timestamp_dt)]
    else:
        turn_where = (
            f"timestamp = (SELECT MAX(timestamp) FROM {event_t} WHERE {in_run} AND event_type = 'turn')"
        )
        turn_params = [project.pk, run.run_id]
    sql = f"""
        SELECT 'm', model, COUNT(*), {nul}, {nul}, {nul}, {nul}, CAST(NULL AS double precision), {nul}, {nul}
          FROM {step_t} WHERE run_id = %s AND model <> '' GROUP BY model
        UNION ALL
        SELECT 'a', NULL, COUNT(*), CAST(SUM(steps) AS bigint), CAST(SUM(prompt_tokens) AS bigint),
               CAST(SUM(completion_tokens) AS bigint), CAST(SUM(tokens) AS bigint), MAX(peak_utilization),
               CAST(SUM(tool_calls) AS bigint), CAST(SUM(errors) AS bigint)
          FROM {turn_t} WHERE run_id = %s
        UNION ALL
        SELECT 'e', raw, {nul}, {nul}, {nul}, {nul}, {nul}, CAST(NULL AS double precision), {nul}, {nul}
          FROM {event_t} WHERE {in_run} AND timestamp >= %s
        UNION ALL
        SELECT 't', raw, {nul}, {nul}, {nul}, {nul}, {nul}, CAST(NULL AS double precision), {nul}, {nul}
          FROM {event_t} WHERE {in_run} AND event_type = 'turn' AND {turn_where}
    """  # noqa: S608  (table names are ours; values are parameters)
    params = [
        run.pk,
        run.pk,
        project.pk,
        run.run_id,
        at(last_new.timestamp_dt),
        project.pk,
        run.run_id,
        *turn_params,
    ]
    counts: Counter[str] = Counter()
    turns: dict[str, Any] = {}
    last: list[TraceEvent] = []
    last_turn: list[TraceEvent] = []
    with prepared.cursor() as cursor:
        cursor.execute(sql, params)
        for kind, text, n, steps, prompt, completion, tokens, peak, tool_calls, errors in cursor.fetchall():
            if kind == "m":
                counts[text] = int(n)
            elif kind == "a":
                turns = {"turns": int(n), "steps": steps, "prompt_tokens": prompt, "completion_tokens": completion,
                         "tokens": tokens, "peak_utilization": peak, "tool_calls": tool_calls,
                         "errors": errors}  # fmt: skip
            elif kind == "e":
                last.append(_parse_stored(text))
            else:
                last_turn.append(_parse_stored(text))
    return _RunSummary(
        counts, turns, max(last, key=_sort_key), max(last_turn, key=_sort_key) if last_turn else None
    )


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
    stored = [_parse_stored(raw) for raw in _stored_raw(project, run.run_id, sorted(set(ids)))]
    mine = [tv for tv in dirty_views if (tv.agent or "") in agents]

    def lifetimes(extra: list[TraceEvent]) -> list[PinLifetime]:
        views = build_steps(normalize_events(sorted(extra, key=_sort_key))) + mine
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
                _parse_stored(raw)
                for agent, turn, raw in events.filter(
                    event_type="context_decision", turn__in=sorted({t for _, t in rendered})
                ).values_list("agent", "turn", "raw")
                if (agent, turn) in rendered
            ]
            pins = lifetimes(stored)
    return [_pin_row(p) for p in pins]
