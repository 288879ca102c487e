"""Turn-by-turn projection: re-project only the turns a batch touches (`do_project_turns`)."""

from __future__ import annotations

import operator
from collections import Counter
from dataclasses import dataclass
from functools import reduce
from typing import Any

from django.db import connection
from django.db.models import Q
from django.utils import timezone

from runtime import TraceEvent
from runtime.facts import (
    PinLifetime,
    TurnView,
    build_steps,
    normalize_events,
    pin_lifetimes,
    status_from_last,
)
from traces.ingest.bulk import _insert_projections, _update_runs
from traces.ingest.projection import (
    _one_turn_event_per_step,
    _parse_stored,
    _pin_row,
    _project_turns,
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


def do_project_turns(project: Project, run: Run, new: list[TraceEvent]) -> bool:
    """Re-project only the turns of `run` that `new` events touch (they are stored already).

    For a run with `run.incremental` and a batch of our events with turns (`_batch_is_local`): a turn
    (agent, n) of such a run is a function of its own events and of the `turn` events they name as
    parent, so only the touched turns are recomputed; pins are recomputed per touched agent from its
    pin/unpin calls (and the working sets that rendered a pin with no token count); the run's counters
    are updated from the batch and a few aggregate queries. Gives exactly the rows `project_run` gives
    (tests/traces/test_ingest_incremental.py). Returns False, having changed nothing that the whole-run
    projection will not replace, when the run leaves the cases this covers; the caller then projects
    it whole. Must run inside the transaction holding the run's lock."""
    touched = _touched_turns(project, run, new)
    if touched is None:
        return False
    dirty, turn_views = touched
    _replace_turn_rows(project, run, dirty, turn_views)
    return _update_counters(project, run, new)


def _touched_turns(
    project: Project, run: Run, new: list[TraceEvent]
) -> tuple[set[tuple[str, int]], list[TurnView]] | None:
    """The (agent, turn) pairs the batch touches and their turn views, rebuilt from the batch and the
    stored events they need; None when the run leaves the cases `do_project_turns` covers."""
    rid = run.run_id
    events = Event.objects.filter(project=project, run_id=rid)
    dirty: set[tuple[str, int]] = {(ev.source_agent or "", local_turn(ev)) for ev in new}  # type: ignore[misc]
    new_turn_ids = {ev.step_id for ev in new if ev.event_type == "turn"}
    # The touched turns' events: the batch's from memory, the others parsed from their rows. One
    # query reads the batch's turns and the stored events naming a new turn event as parent (their
    # turn may change: its step's id); a second one only when those are in other turns.
    turns = sorted({t for _, t in dirty})
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
        loaded += [
            _parse_stored(raw)
            for raw in events.filter(step_id__in=parents, event_type="turn").values_list("raw", flat=True)
        ]
    turn_views = [
        tv
        for tv in build_steps(normalize_events(sorted(loaded, key=_sort_key)))
        if (tv.agent or "", tv.turn) in dirty
    ]
    if not _one_turn_event_per_step(turn_views):
        return None
    return dirty, turn_views


def _replace_turn_rows(
    project: Project, run: Run, dirty: set[tuple[str, int]], turn_views: list[TurnView]
) -> None:
    """Project the touched turns and replace their rows (and the touched agents' pins when a pin may
    have changed)."""
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
    _delete_turns(run, by_agent, in_dirty, pin_agents)
    _insert_projections([(run, proj)])


def _update_counters(project: Project, run: Run, new: list[TraceEvent]) -> bool:
    """The run's counters after the batch: its additions and aggregates over the turns and the last
    events. False when a whole-run fact is at stake (the caller then projects the run whole)."""
    new_turns = [ev for ev in new if ev.event_type == "turn"]
    summary = _run_summary(
        project, run, max(new, key=_sort_key), max(new_turns, key=_sort_key) if new_turns else None
    )
    # The run's model: the most used over all steps (a tie is left to the whole-run projection, which
    # breaks it by step order).
    model = _top_model(summary.models)
    if model is None:
        return False  # the rows written above are replaced by the caller's whole-run projection
    # The run's counters: the batch's additions, and aggregates over the turns and the last events.
    agg = summary.turns
    last, last_turn = summary.last, summary.last_turn
    by_primitive = primitive_counts(new)
    stamps = [ev.timestamp_dt for ev in new]
    run.agents = sorted(set(run.agents) | {a for ev in new if (a := ev.source_agent)})
    run.model = model[:200]
    run.status = status_from_last(last, last_turn)
    if run.status == Run.Status.FAILED:
        return False  # the reason of a failed run is a whole-run fact (`runtime.facts.run_outcome`)
    for key, value in (("bundle_id", run.bundle_id), ("delegated_by_run_id", run.delegated_by_run_id)):
        if any(ev.metadata.get(key, value or None) != (value or None) for ev in new):
            return False  # a run's links are its first event's (`runtime.facts.run_links`): whole run
    run.started_at = min([*stamps, run.started_at] if run.started_at else stamps)
    run.ended_at = max([*stamps, run.ended_at] if run.ended_at else stamps)
    if not agg["steps"]:
        return False  # no step at all: the whole-run projection decides the status (see `Run`)
    run.turns = agg["turns"]
    run.steps = agg["steps"] or 0
    run.events += len(new)
    run.prompt_tokens = agg["prompt_tokens"] or 0
    run.completion_tokens = agg["completion_tokens"] or 0
    run.tokens = agg["tokens"] or 0
    run.tool_calls = agg["tool_calls"] or 0
    run.errors = agg["errors"] or 0  # every event of such a run belongs to a turn
    run.primitives += sum(by_primitive.values())
    run.recall_count += by_primitive.get("recall", 0)
    run.pin_count += by_primitive.get("pin", 0)
    run.unpin_count += by_primitive.get("unpin", 0)
    run.peak_utilization = agg["peak_utilization"]
    run.updated_at = timezone.now()
    _update_runs([run])
    return True


def _touched_rows(
    project: Project, run_id: str, turns: list[int], parents: list[str]
) -> list[tuple[str, str | None, str, int | None, str]]:
    """(step_id, parent_step_id, agent, turn, raw) of the run's stored events in `turns` or whose parent
    is one of `parents`: one query, in SQL (building it with the ORM cost a live batch more than
    running it)."""
    qn = connection.ops.quote_name
    where = [f"{qn('turn')} IN ({', '.join(['%s'] * len(turns))})"] if turns else []
    if parents:
        where.append(f"parent_step_id IN ({', '.join(['%s'] * len(parents))})")
    if not where:
        return []
    sql = (
        f"SELECT step_id, parent_step_id, agent, {qn('turn')}, raw FROM {qn(Event._meta.db_table)} "
        f"WHERE project_id = %s AND run_id = %s AND ({' OR '.join(where)})"
    )  # noqa: S608  (names are ours; values are parameters)
    with connection.cursor() as cursor:
        cursor.execute(sql, [project.pk, run_id, *turns, *parents])
        return list(cursor.fetchall())


def _delete_turns(run: Run, by_agent: dict[str, list[int]], in_dirty: Q, pin_agents: set[str]) -> None:
    """Delete the projection rows of the touched turns (`by_agent`: agent → turn numbers) and the pins of
    `pin_agents`. PostgreSQL: one statement (data-modifying CTEs; the foreign keys are deferred to the
    commit, so children and parents may go together). Elsewhere: one DELETE per table."""
    if connection.vendor == "postgresql":
        qn = connection.ops.quote_name
        pairs = [(a, t) for a, ts in by_agent.items() for t in ts]
        agents, turns = [a for a, _ in pairs], [t for _, t in pairs]
        touched = "(agent, {col}) IN (SELECT * FROM unnest(%s::text[], %s::int[]))"
        parts: list[str] = []
        params: list[Any] = []
        for model, col in ((ContextDecision, "turn_number"), (PrimitiveEvent, "turn_number"), (Step, "turn_number"), (Turn, "number")):  # fmt: skip
            parts.append(
                f"DELETE FROM {qn(model._meta.db_table)} WHERE run_id = %s AND {touched.format(col=col)}"
            )
            params += [run.pk, agents, turns]
        if pin_agents:
            parts.append(
                f"DELETE FROM {qn(Pin._meta.db_table)} WHERE run_id = %s AND agent = ANY(%s::text[])"
            )
            params += [run.pk, sorted(pin_agents)]
        sql = "WITH " + ", ".join(f"d{i} AS ({p})" for i, p in enumerate(parts[:-1])) + " " + parts[-1]
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
        return
    for m in (ContextDecision, PrimitiveEvent, Step):
        qs = m.objects.filter(run=run).filter(in_dirty)
        qs._raw_delete(qs.db)
    dirty_turns = Turn.objects.filter(run=run).filter(
        reduce(operator.or_, (Q(agent=a, number__in=ts) for a, ts in by_agent.items()))
    )
    dirty_turns._raw_delete(dirty_turns.db)
    if pin_agents:
        dirty_pins = Pin.objects.filter(run=run, agent__in=pin_agents)
        dirty_pins._raw_delete(dirty_pins.db)


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
    with connection.cursor() as cursor:
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
    events = Event.objects.filter(project=project, run_id=run.run_id)
    ids = list(
        PrimitiveEvent.objects.filter(run=run, agent__in=agents, primitive__in=("pin", "unpin"))
        .exclude(in_dirty)
        .values_list("event_step_id", flat=True)
    )
    stored = (
        [_parse_stored(raw) for raw in events.filter(step_id__in=ids).values_list("raw", flat=True)]
        if ids
        else []
    )
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
            stored += [
                _parse_stored(raw)
                for agent, turn, raw in events.filter(
                    event_type="context_decision", turn__in=sorted({t for _, t in rendered})
                ).values_list("agent", "turn", "raw")
                if (agent, turn) in rendered
            ]
            pins = lifetimes(stored)
    return [_pin_row(p) for p in pins]
