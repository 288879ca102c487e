"""Stage 3, store raw: a batch's valid events written as they came, keyed by (project, run_id, step_id).

`prepare_raw` groups the batch by run, creates the runs that are new and locks them all (in run_id
order, so two writers never deadlock), tells the events already stored (or repeated in the batch) from
the new ones, and reads what the turn-by-turn projection will need of the stored events before the
new ones join them (`reads.rows_before_batch`). `raw_written` writes the new ones: the code in its
block (stage 4's projection of the new runs) runs while PostgreSQL stores the rows.

Which events are stored already is decided three ways on PostgreSQL and one elsewhere:

- `ARBITER`, a live batch (at most `SMALL_BATCH_ROWS // 4` events) to runs with events: the insert
  skips what is stored (`ON CONFLICT DO NOTHING RETURNING`, `bulk.insert_new_events`);
- `OPTIMISTIC`, a larger batch to runs with events: written after a savepoint as if none were stored;
  when the unique index refuses a row, rolled back to it and written again without the stored ones;
- `ASKED` (elsewhere, or when every run is new): the stored ones are asked for first (none, for new
  runs, whose lock this transaction holds).
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from django.db import IntegrityError, connection, models
from django.utils import timezone

from runtime import TraceEvent
from traces.core import prepared
from traces.ingest import reads
from traces.ingest.bulk import SMALL_BATCH_ROWS, insert_new_events, json_rows, raw_events_written
from traces.ingest.events import is_local_batch, local_turn
from traces.ingest.validation import CheckedEvent, Status
from traces.models import Event, Project, Run

ARBITER: Final = "arbiter"
OPTIMISTIC: Final = "optimistic"
ASKED: Final = "asked"


@dataclass
class RawBatch:
    """A batch on its way through storing: its events by run, its runs (locked), each event's status
    so far, the raw rows to write (tuples in `bulk.EVENT_COLUMNS` order) and, once known, the new
    events of each run (`fresh`, in the batch's order)."""

    project: Project
    by_run: dict[str, dict[str, CheckedEvent]]
    runs: dict[str, Run]
    statuses: dict[int, Status]
    mode: str
    now: datetime
    rows: list[tuple[Any, ...]] = field(default_factory=list)
    fresh: dict[str, list[TraceEvent]] = field(default_factory=dict)
    #: For each continued run that may go turn by turn: its stored rows near the batch's turns.
    stored_before: dict[str, list[reads.Row]] = field(default_factory=dict)

    def changed(self) -> list[Run]:
        """The runs that gained events, in run_id order."""
        return [self.runs[rid] for rid in sorted(self.by_run) if rid in self.fresh]

    def new_runs(self) -> list[Run]:
        """The runs that gained events and had none before: every event of theirs is in `fresh`."""
        return [run for run in self.changed() if run.events == 0]


def prepare_raw(project: Project, checked: list[CheckedEvent]) -> RawBatch:
    """Lock the batch's runs (creating the new ones) and find its rows to write; see the module
    docstring. Must run inside the batch's transaction."""
    statuses: dict[int, Status] = {}
    by_run: dict[str, dict[str, CheckedEvent]] = {}
    for c in checked:
        run_events = by_run.setdefault(c.event.run_id, {})
        if c.event.step_id in run_events:
            statuses[c.index] = "duplicate"  # repeated inside this batch: the first one wins
        else:
            run_events[c.event.step_id] = c
    run_ids = sorted(by_run)
    runs = _lock_runs(project, run_ids)
    # Runs with stored events may already hold some of these; new runs cannot (we hold their lock).
    seen_runs = [rid for rid in run_ids if runs[rid].events > 0]
    postgres = connection.vendor == "postgresql"
    mode = ASKED
    if seen_runs and postgres:
        mode = ARBITER if len(checked) <= SMALL_BATCH_ROWS // 4 else OPTIMISTIC
    existing: set[tuple[str, str]] = set()
    if seen_runs and mode == ASKED:
        existing = reads.stored_keys(project, [(rid, sid) for rid in seen_runs for sid in by_run[rid]])
    batch = RawBatch(project, by_run, runs, statuses, mode, timezone.now())
    # A continued run that may go turn by turn: the stored rows its turns need, read before the
    # batch's own rows are written (`reads.rows_before_batch`).
    batch.stored_before = {
        rid: reads.rows_before_batch(project, runs[rid], events)
        for rid in seen_runs
        if runs[rid].incremental
        and is_local_batch(
            events := [c.event for sid, c in by_run[rid].items() if (rid, sid) not in existing]
        )
    }
    batch.rows = _event_rows(project, by_run, run_ids, existing, statuses, batch.now)
    if mode != ARBITER:  # known before the write; a live batch's, from the insert
        batch.fresh = _fresh_events(batch.rows, None, by_run, statuses)
    return batch


@contextlib.contextmanager
def raw_written(batch: RawBatch) -> Iterator[None]:
    """Write the batch's new raw events. The block runs once they are sent (`bulk.raw_events_written`:
    PostgreSQL stores them meanwhile), with `batch.fresh` known; `batch.rows`, `fresh` and `statuses`
    are final once the block is left.

    `OPTIMISTIC`: the rows go after a savepoint. When the unique (project, run_id, step_id) index
    refuses one, the transaction goes back to the savepoint (nothing of the attempt is kept), the
    stored ones are marked duplicates and the others written again (the block is not run again: its
    caller checks `fresh`). Why: asking first (`reads.stored_keys`, one index probe per event and an
    array of every id) cost a 500-event batch more than the savepoint, and a replayed event is the
    exception: mix (a) of bench/ingest.py took 4.5% less wall time without it. The savepoint is never
    released: the batch's later statements run inside it, and the commit commits it with the rest
    (one statement instead of Django's two, `transaction.atomic`'s SAVEPOINT and RELEASE)."""
    if batch.mode == ARBITER:
        inserted = insert_new_events(batch.rows)
        batch.fresh = _fresh_events(batch.rows, inserted, batch.by_run, batch.statuses)
        yield
        return
    if batch.mode != OPTIMISTIC:
        with raw_events_written(batch.rows):
            yield
        return
    from psycopg.errors import UniqueViolation  # PostgreSQL only; SQLite installs may lack psycopg

    with connection.cursor() as cursor:
        cursor.execute(f"SAVEPOINT {_BEFORE_EVENTS}")
    block_done = False
    try:
        with raw_events_written(batch.rows):
            yield
            block_done = True
        return
    except (IntegrityError, UniqueViolation) as exc:
        # The COPY's error comes from psycopg itself; a statement's through Django (its __cause__).
        cause = exc if isinstance(exc, UniqueViolation) else exc.__cause__
        if not block_done or not (
            isinstance(cause, UniqueViolation) and cause.diag.table_name == Event._meta.db_table
        ):
            raise
    with connection.cursor() as cursor:
        cursor.execute(f"ROLLBACK TO SAVEPOINT {_BEFORE_EVENTS}")
    stored = reads.stored_keys(batch.project, [(r[1], r[2]) for r in batch.rows])
    batch.rows = _event_rows(
        batch.project, batch.by_run, sorted(batch.by_run), stored, batch.statuses, batch.now
    )
    batch.fresh = _fresh_events(batch.rows, None, batch.by_run, batch.statuses)
    with raw_events_written(batch.rows):
        pass


_BEFORE_EVENTS = "ingest_before_events"


def _lock_runs(project: Project, run_ids: list[str]) -> dict[str, Run]:
    """Create the runs that do not exist and lock them all. Must run inside a transaction.

    Why: two writers streaming the same run would otherwise both read "no events yet" and write
    projections over each other. Creating with ON CONFLICT DO NOTHING then locking with FOR UPDATE
    serialises them per run; sorting the ids gives every writer the same lock order (no deadlock).
    """
    now = timezone.now()
    if connection.vendor == "postgresql":
        return _upsert_runs(project, run_ids, now)
    Run.objects.bulk_create(
        [Run(project=project, run_id=rid, created_at=now, updated_at=now) for rid in run_ids],
        ignore_conflicts=True,
    )
    locked = Run.objects.select_for_update().filter(project=project, run_id__in=run_ids).order_by("run_id")
    return {run.run_id: run for run in locked}


def _upsert_runs(project: Project, run_ids: list[str], now: datetime) -> dict[str, Run]:
    """PostgreSQL: create and lock the runs in one statement. `ON CONFLICT DO UPDATE` (a no-op update)
    takes the row lock of an existing run as `SELECT … FOR UPDATE` would, and `RETURNING` gives the
    rows; the rows go in sorted order (`WITH ORDINALITY`), so every writer locks in the same order (no
    deadlock).

    The new rows are one JSON text expanded by `json_populate_recordset` (as `bulk` writes
    projection rows), not a parameter per column per run: psycopg splits and quotes a statement of
    more than 50 parameters in Python on every call, which cost more than the statement itself."""
    qn = connection.ops.quote_name
    table = qn(Run._meta.db_table)
    columns = _run_columns()
    base = _run_defaults()
    rows = [
        {**base, "project_id": project.pk, "run_id": rid, "created_at": now, "updated_at": now}
        for rid in sorted(run_ids)
    ]
    cols = ", ".join(qn(c) for c in columns)
    sql = (
        f"INSERT INTO {table} ({cols}) SELECT {cols} FROM json_populate_recordset(NULL::{table}, %s) "
        f"WITH ORDINALITY AS r ORDER BY r.ordinality "
        f"ON CONFLICT ({qn('project_id')}, {qn('run_id')}) DO UPDATE SET {qn('run_id')} = EXCLUDED.{qn('run_id')} "
        f"RETURNING {qn('id')}, {cols}"
    )  # noqa: S608  (names are ours; values are one parameter)
    with prepared.cursor() as cursor:
        cursor.execute(sql, [json_rows(rows, Run)])
        fetched = cursor.fetchall()
    attnames = ["id", *(f.attname for f in _run_fields())]
    runs = [Run.from_db(connection.alias, attnames, _from_db_row(row)) for row in fetched]
    return {run.run_id: run for run in runs}


@functools.cache
def _run_fields() -> tuple[models.Field[Any, Any], ...]:
    """`Run`'s concrete fields but the primary key, in column order."""
    return tuple(f for f in Run._meta.concrete_fields if not f.primary_key)


@functools.cache
def _run_columns() -> tuple[str, ...]:
    return tuple(f.column for f in _run_fields())


@functools.cache
def _run_defaults() -> dict[str, Any]:
    """A new run's column values (the model's defaults), by column name; the caller sets the project,
    `run_id` and the dates. Built once per process; never changed (each row copies it)."""
    template = Run(project_id=0, run_id="")
    return {f.column: getattr(template, f.attname) for f in _run_fields()}


@functools.cache
def _run_converters() -> tuple[Callable[[Any], Any], ...]:
    """Per column of `Run` (id first), the conversion Django applies to a raw value (jsonb text → list)."""
    out: list[Callable[[Any], Any]] = [lambda v: v]
    for f in _run_fields():
        if isinstance(f, models.JSONField):
            out.append(lambda v: json.loads(v) if isinstance(v, str) else v)
        else:
            out.append(lambda v: v)
    return tuple(out)


def _from_db_row(row: tuple[Any, ...]) -> list[Any]:
    return [conv(v) for conv, v in zip(_run_converters(), row, strict=True)]


def _event_rows(
    project: Project,
    by_run: dict[str, dict[str, CheckedEvent]],
    run_ids: list[str],
    existing: set[tuple[str, str]],
    statuses: dict[int, Status],
    now: datetime,
) -> list[tuple[Any, ...]]:
    """The raw rows of the batch's events but those in `existing` (each marked a duplicate), as plain
    tuples in `bulk.EVENT_COLUMNS` order (not model instances): the hottest loop of ingestion. On
    PostgreSQL an event's time is its own text when that is plain UTC (`utc_text`), else its
    datetime."""
    new_rows: list[tuple[Any, ...]] = []
    project_pk = project.pk  # a property of Django's (a lookup each time): once, not per event
    postgres = connection.vendor == "postgresql"
    for rid in run_ids:
        for sid, c in by_run[rid].items():
            if (rid, sid) in existing:
                statuses[c.index] = "duplicate"
                continue
            ev = c.event
            stamp = ev.timestamp
            new_rows.append(
                (project_pk, rid, sid, ev.parent_step_id, ev.event_type, ev.source_agent or "",
                 stamp if postgres and utc_text(stamp) else ev.timestamp_dt, c.raw, now, local_turn(ev))
            )  # fmt: skip
    return new_rows


#: An event time PostgreSQL reads as the instant Python read (`timestamp_dt`): ISO 8601's extended
#: form in UTC, to the microsecond at most (as our runtime writes it). Such a text goes to PostgreSQL
#: as it is (COPY text, or a live batch's JSON), which spares `datetime.isoformat` (0.68 µs an event,
#: against 0.29 µs for this match); any other time goes as the datetime Python read. ASCII digits
#: only: `\d` would take other scripts' digits.
utc_text = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,6})?(?:\+00:00|Z)"
).fullmatch


def _fresh_events(
    new_rows: list[tuple[Any, ...]],
    inserted: set[tuple[str, str]] | None,
    by_run: dict[str, dict[str, CheckedEvent]],
    statuses: dict[int, Status],
) -> dict[str, list[TraceEvent]]:
    """The events of `new_rows` by run id, each marked accepted; with `inserted` (the rows the insert
    wrote), the others are duplicates."""
    fresh: dict[str, list[TraceEvent]] = {}
    for row in new_rows:
        c = by_run[row[1]][row[2]]
        if inserted is not None and (row[1], row[2]) not in inserted:
            statuses[c.index] = "duplicate"
            continue
        statuses[c.index] = "accepted"
        fresh.setdefault(row[1], []).append(c.event)
    return fresh
