"""Reads of stored raw events (the `Event` table) that the stages need: which of a batch's events are
stored already, the stored neighbours of a batch's turns, every event of a run.

A helper of the store-raw and project stages (`storing`, `projecting`, `incremental`), no stage of its
own. One write: `load_events` fills in the `turn` of rows stored before `Event.turn` existed.
"""

from __future__ import annotations

import json
from typing import Any

from django.db import connection

from runtime import TraceEvent
from traces.core import prepared
from traces.ingest.events import local_turn
from traces.models import Event, Project, Run

Row = tuple[str, str | None, str, int | None, str]


def rows_before_batch(project: Project, run: Run, batch: list[TraceEvent]) -> list[Row]:
    """The stored rows `incremental.do_project_turns` reads for any part of `batch` (the run's events
    of a batch), read before the batch's rows are written.

    Why before: read after, they also hold the batch's own rows, twice over (once by turn, once by
    parent), raw text included, only to be skipped. A batch's events that turn out to be duplicates
    only widen the read: `incremental` keeps the rows of the turns the new events touch."""
    turns = sorted({t for ev in batch if (t := local_turn(ev)) is not None})
    return touched_rows(
        project, run.run_id, turns, sorted({ev.step_id for ev in batch if ev.event_type == "turn"})
    )


def touched_rows(project: Project, run_id: str, turns: list[int], parents: list[str]) -> list[Row]:
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
        ranges = consecutive_spans(turns)
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


def stored_raw(
    project: Project, run_id: str, step_ids: list[str], event_type: str | None = None
) -> list[str]:
    """The raw text of the run's stored events among `step_ids` (of `event_type` only, when given): one
    query. PostgreSQL: a UNION ALL of unique-key look-ups (an `IN` list, with a live run's stale
    statistics, is planned as a scan of the run filtered by the list; see `touched_rows`)."""
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


def consecutive_spans(numbers: list[int]) -> list[tuple[int, int]]:
    """Sorted distinct `numbers` as runs of consecutive values: [1, 2, 3, 7] → [(1, 3), (7, 7)]."""
    out: list[tuple[int, int]] = []
    for n in numbers:
        if out and n == out[-1][1] + 1:
            out[-1] = (out[-1][0], n)
        elif not out or n > out[-1][1]:
            out.append((n, n))
    return out


def stored_keys(project: Project, keys: list[tuple[str, str]]) -> set[tuple[str, str]]:
    """The (run_id, step_id) pairs among `keys` that are stored already: one query, in SQL (building it
    with the ORM cost a small batch more than running it); a live batch on PostgreSQL does not ask
    (`insert_new_events`).

    PostgreSQL: one probe of the unique (project, run_id, step_id) index per key, whatever the table's
    statistics say. With `IN` lists, a project whose rows are newer than the statistics was planned as
    a scan of all its events, filtered by the lists: a batch's check grew with the project (47,000
    rows read for a 300-event batch in bench/ingest.py's mix (a))."""
    table = connection.ops.quote_name(Event._meta.db_table)
    if connection.vendor == "postgresql":
        # A LATERAL subquery with LIMIT is never turned into a join: it runs once per key, as an index
        # look-up (an equality on every column of a unique index is estimated at one row).
        sql = (
            "SELECT k.run_id, k.step_id FROM unnest(%s::text[], %s::text[]) AS k(run_id, step_id) "
            f"CROSS JOIN LATERAL (SELECT 1 FROM {table} AS e WHERE e.project_id = %s "
            "AND e.run_id = k.run_id AND e.step_id = k.step_id LIMIT 1) AS stored"
        )  # noqa: S608  (names are ours; values are parameters)
        with prepared.cursor() as cursor:
            cursor.execute(sql, [[rid for rid, _ in keys], [sid for _, sid in keys], project.pk])
            return set(cursor.fetchall())
    run_ids = sorted({rid for rid, _ in keys})
    step_ids = sorted({sid for _, sid in keys})
    sql = (
        f"SELECT run_id, step_id FROM {table} WHERE project_id = %s "
        f"AND run_id IN ({', '.join(['%s'] * len(run_ids))}) AND step_id IN ({', '.join(['%s'] * len(step_ids))})"
    )  # noqa: S608  (names are ours; values are parameters)
    with connection.cursor() as cursor:
        cursor.execute(sql, [project.pk, *run_ids, *step_ids])
        return set(cursor.fetchall())


def load_events(project: Project, runs: list[Run]) -> dict[int, list[TraceEvent]]:
    """Every stored event of these runs, parsed (they were validated when stored)."""
    if not runs:
        return {}
    pk_of = {run.run_id: run.pk for run in runs}
    out: dict[int, list[TraceEvent]] = {run.pk: [] for run in runs}
    rows = Event.objects.filter(project=project, run_id__in=list(pk_of)).values_list(
        "pk", "run_id", "raw", "turn"
    )
    stale: list[tuple[int | None, int]] = []
    for pk, rid, raw, turn in rows.iterator(chunk_size=2000):
        ev = TraceEvent.from_dict(json.loads(raw))
        out[pk_of[rid]].append(ev)
        if turn != local_turn(ev):
            stale.append((local_turn(ev), pk))
    if stale:
        # Rows stored before `Event.turn` existed: fill it in, so the run can go turn by turn from now on.
        with connection.cursor() as cursor:
            cursor.executemany("UPDATE traces_event SET turn = %s WHERE id = %s", stale)
    return out
