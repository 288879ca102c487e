"""`do_*`: the writes of a batch (raw events first, then projections) and `ingest_events`, the entry point.

Assumes valid input (`traces.ingest.validation`). See the package docstring for the contract."""

from __future__ import annotations

import contextlib
import functools
import gc
import json
import logging
import re
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import Any

from django.db import IntegrityError, InterfaceError, OperationalError, connection, models, transaction
from django.utils import timezone

from runtime import TraceEvent
from runtime.errors import TraceFormatError
from traces.core import prepared
from traces.ingest.bulk import (
    SMALL_BATCH_ROWS,
    _insert_events,
    _insert_projections,
    _json_rows,
    insert_new_events,
)
from traces.ingest.incremental import do_project_turns, rows_before_batch, whole_run_tally
from traces.ingest.projection import _Projection, local_turn, project_run
from traces.ingest.validation import (
    CheckedEvent,
    EventResult,
    IngestResult,
    Source,
    Status,
    _printable,
    check_event,
    check_events,
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

log = logging.getLogger(__name__)


def ingest_events(
    project: Project,
    events: list[Any],
    *,
    source: Source,
    raw_texts: list[str | None] | None = None,
) -> IngestResult:
    """Validate and store a batch of events for `project`; see the module docstring for the contract.

    `raw_texts[i]`, when given, is the exact JSON text of `events[i]` (JSONL callers pass the line, so
    the stored raw event is byte-for-byte what the producer wrote). Results are in input order.
    """
    with collector_paused():
        return _ingest_events(project, events, source=source, raw_texts=raw_texts)


def _ingest_events(
    project: Project,
    events: list[Any],
    *,
    source: Source,
    raw_texts: list[str | None] | None = None,
) -> IngestResult:
    checked, rejected = check_events(events, raw_texts=raw_texts)
    by_index = {r.index: r for r in rejected}
    statuses: dict[int, Status] = {}
    if checked:
        try:
            statuses = do_ingest(project, checked)
        except Exception as exc:
            if _is_outage(exc):
                raise
            # Validation let through something the database or the projection cannot take (a bug of
            # ours): store the batch event by event, so only the event(s) to blame are lost. Logged.
            log.exception(
                "ingest via %s: a batch of %s events failed; retrying one by one", source, len(checked)
            )
            for c in checked:
                try:
                    statuses.update(do_ingest(project, [c]))
                except Exception as one_exc:
                    if _is_outage(one_exc):
                        raise
                    log.exception("ingest via %s: event %s could not be stored", source, c.index)
                    by_index[c.index] = EventResult(c.index, "rejected", STORE_FAILED)
    result = IngestResult()
    for c in checked:
        if c.index not in by_index:
            by_index[c.index] = EventResult(c.index, statuses[c.index])
    result.results = [by_index[i] for i in range(len(events))]
    for r in result.results:
        if r.status == "accepted":
            result.accepted += 1
        elif r.status == "duplicate":
            result.duplicates += 1
        else:
            result.rejected += 1
    result.runs = sorted({c.event.run_id for c in checked if c.index in statuses})
    log.debug("ingest via %s: %s accepted, %s duplicates", source, result.accepted, result.duplicates)
    return result


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Run the block with Python's cyclic garbage collector paused (objects are still freed by
    reference counting; the collector runs again after the block, over what is still alive).

    Why: a batch allocates hundreds of thousands of objects (decoded events, parsed events, rows),
    nearly all freed when the batch ends and none in a cycle; with the collector on, every 700
    allocations a collection walks the batch's live objects again, and survivors are walked again by
    the older generations. Paused when already paused elsewhere: left as it is."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


#: The message of an event that passed validation but could not be written (see `ingest_events`).
STORE_FAILED = (
    "the event passed validation but could not be stored (a server error, logged); please report it"
)


def _is_outage(exc: BaseException) -> bool:
    """True for a failure of the database itself (down, connection lost), not of the data: retrying
    event by event would only reject good events, so the caller gets the error (a 5xx / a retry)."""
    if isinstance(exc, OperationalError | InterfaceError):
        return True
    try:
        import psycopg
    except ImportError:  # pragma: no cover - SQLite-only installs
        return False
    return isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError)


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

    The new rows are one JSON text expanded by `json_populate_recordset` (as `_insert_small` writes
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
        cursor.execute(sql, [_json_rows(rows, Run)])
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


def do_ingest(project: Project, checked: list[CheckedEvent]) -> dict[int, Status]:
    """Write valid events (raw first), then recompute the projections of the runs that gained events.

    One transaction; returns `accepted` / `duplicate` per input index."""
    statuses: dict[int, Status] = {}
    by_run: dict[str, dict[str, CheckedEvent]] = {}
    for c in checked:
        run_events = by_run.setdefault(c.event.run_id, {})
        if c.event.step_id in run_events:
            statuses[c.index] = "duplicate"  # repeated inside this batch: the first one wins
        else:
            run_events[c.event.step_id] = c
    run_ids = sorted(by_run)
    with transaction.atomic():
        runs = _lock_runs(project, run_ids)
        # Runs with stored events may already hold some of these; new runs cannot (we hold their lock).
        seen_runs = [rid for rid in run_ids if runs[rid].events > 0]
        # A live batch on PostgreSQL: the insert itself skips what is stored (`insert_new_events`).
        arbiter = (
            bool(seen_runs) and connection.vendor == "postgresql" and len(checked) <= SMALL_BATCH_ROWS // 4
        )
        # A large batch on PostgreSQL is written as if none of its events were stored (`optimistic`:
        # the unique index refuses a stored one); elsewhere the stored ones are asked for first.
        optimistic = bool(seen_runs) and not arbiter and connection.vendor == "postgresql"
        existing: set[tuple[str, str]] = set()
        if seen_runs and not arbiter and not optimistic:
            existing = _stored_keys(project, [(rid, sid) for rid in seen_runs for sid in by_run[rid]])
        # The stored rows the turn-by-turn projection of each continued run reads, read before the
        # batch's own rows are written (`rows_before_batch`).
        stored_before = {
            rid: rows_before_batch(project, runs[rid], batch)
            for rid in seen_runs
            if runs[rid].incremental
            and _batch_is_local(
                batch := [c.event for sid, c in by_run[rid].items() if (rid, sid) not in existing]
            )
        }
        now = timezone.now()
        new_rows = _event_rows(project, by_run, run_ids, existing, statuses, now)
        inserted = insert_new_events(new_rows) if arbiter else None
        fresh = _fresh_events(new_rows, inserted, by_run, statuses)
        changed = [runs[rid] for rid in run_ids if rid in fresh]
        # New runs: every event is in memory. Incremental runs: only the touched turns. Others: all.
        full = [run for run in changed if run.events == 0]

        def project_new_runs() -> list[_Projection]:
            return [project_run(fresh[run.run_id]) for run in full]

        # A new run's projection needs none of the stored rows: it is computed while the database
        # writes the raw events (`_insert_events`).
        if arbiter:
            projected = project_new_runs()
        elif optimistic:
            attempt = _insert_unless_stored(
                new_rows, project_new_runs, lambda: _stored_keys(project, [(r[1], r[2]) for r in new_rows])
            )
            if isinstance(attempt, set):  # some were stored (none was written): write the others
                new_rows = _event_rows(project, by_run, run_ids, attempt, statuses, now)
                fresh = _fresh_events(new_rows, None, by_run, statuses)
                changed = [runs[rid] for rid in run_ids if rid in fresh]
                full = [run for run in changed if run.events == 0]
                projected = _insert_events(new_rows, project_new_runs)
            else:
                projected = attempt
        else:
            projected = _insert_events(new_rows, project_new_runs)
        reload: list[Run] = []
        # With new runs in the batch, a continued run's new rows are written with theirs.
        continued: list[tuple[Run, _Projection]] | None = [] if full else None
        for run in changed:
            if run.events == 0:
                continue
            if not (run.incremental and _batch_is_local(fresh[run.run_id])):
                reload.append(run)
            elif not do_project_turns(
                project, run, fresh[run.run_id], stored=stored_before.get(run.run_id), deferred=continued
            ):
                reload.append(run)  # a case the turn-by-turn path does not cover: project it whole
        events_of = _load_events(project, reload)
        events_of.update((run.pk, fresh[run.run_id]) for run in full)  # a new run's: all in the batch
        if full or reload:
            do_write_projections(
                full + reload,
                events_of,
                replace=[run.pk for run in reload],
                projected=projected,
                tally=True,
                continued=continued or (),
            )
    return statuses


def _event_rows(
    project: Project,
    by_run: dict[str, dict[str, CheckedEvent]],
    run_ids: list[str],
    existing: set[tuple[str, str]],
    statuses: dict[int, Status],
    now: datetime,
) -> list[tuple[Any, ...]]:
    """The raw rows of the batch's events but those in `existing` (each marked a duplicate), as plain
    tuples in `_EVENT_COLUMNS` order (not model instances): the hottest loop of ingestion. On
    PostgreSQL an event's time is its own text when that is plain UTC (`_utc_text`), else its
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
                 stamp if postgres and _utc_text(stamp) else ev.timestamp_dt, c.raw, now, local_turn(ev))
            )  # fmt: skip
    return new_rows


#: An event time PostgreSQL reads as the instant Python read (`timestamp_dt`): ISO 8601's extended
#: form in UTC, to the microsecond at most (as our runtime writes it). Such a text goes to PostgreSQL
#: as it is (COPY text, or a live batch's JSON), which spares `datetime.isoformat` (0.68 µs an event,
#: against 0.29 µs for this match); any other time goes as the datetime Python read. ASCII digits
#: only: `\d` would take other scripts' digits.
_utc_text = re.compile(
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


def _insert_unless_stored(
    rows: list[tuple[Any, ...]],
    meanwhile: Callable[[], list[_Projection]],
    stored: Callable[[], set[tuple[str, str]]],
) -> list[_Projection] | set[tuple[str, str]]:
    """PostgreSQL: `_insert_events(rows, meanwhile)` after a savepoint, for a batch whose events may be
    stored already (it continues a run). Returns what `meanwhile` returns; when the unique (project,
    run_id, step_id) index refused a row, the transaction goes back to the savepoint (nothing of the
    attempt is kept) and the (run_id, step_id) of the stored ones (`stored()`) are returned instead.

    Why: asking first (`_stored_keys`, one index probe per event and an array of every id) cost a
    500-event batch more than the savepoint, and a replayed event is the exception: mix (a) of
    bench/ingest.py took 4.5% less wall time without it. The savepoint is never released: the
    batch's later statements run inside it, and the commit commits it with the rest (one statement
    instead of Django's two, `transaction.atomic`'s SAVEPOINT and RELEASE)."""
    from psycopg.errors import UniqueViolation  # PostgreSQL only; SQLite installs may lack psycopg

    with connection.cursor() as cursor:
        cursor.execute(f"SAVEPOINT {_BEFORE_EVENTS}")
    try:
        return _insert_events(rows, meanwhile)
    except (IntegrityError, UniqueViolation) as exc:
        # The COPY's error comes from psycopg itself; a statement's through Django (its __cause__).
        cause = exc if isinstance(exc, UniqueViolation) else exc.__cause__
        if not (isinstance(cause, UniqueViolation) and cause.diag.table_name == Event._meta.db_table):
            raise
    with connection.cursor() as cursor:
        cursor.execute(f"ROLLBACK TO SAVEPOINT {_BEFORE_EVENTS}")
    return stored()


_BEFORE_EVENTS = "ingest_before_events"


def _stored_keys(project: Project, keys: list[tuple[str, str]]) -> set[tuple[str, str]]:
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


def _batch_is_local(events: list[TraceEvent]) -> bool:
    return all(local_turn(ev) is not None and ev.stop_reason != "error" for ev in events)


def _load_events(project: Project, runs: list[Run]) -> dict[int, list[TraceEvent]]:
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


def do_rebuild_projections(
    *, project: Project | None = None, run_id: str | None = None, problems: list[str] | None = None
) -> int:
    """Recompute projections of every run (of `project`, or the one `run_id`) from raw events.

    Gives the same rows as ingestion did. One transaction per run, with the run locked. Never stops on
    one bad row or run: a stored event that no longer passes `check_event` (stored by an older version,
    or edited in the database) is left out of its run's projection, and a run that still cannot be
    projected keeps its old rows; each is described in `problems` (when given) and logged, and the
    other runs go on. Returns the number of runs rebuilt."""
    qs = Run.objects.all()
    if project is not None:
        qs = qs.filter(project=project)
    if run_id is not None:
        qs = qs.filter(run_id=run_id)
    found: list[str] = [] if problems is None else problems
    count = 0
    for pk, pid, rid in qs.order_by("pk").values_list("pk", "project_id", "run_id"):
        label = f"run {rid!r} of project {pid}"
        try:
            with transaction.atomic():
                # The run's own dates are recomputed: cleared first, so a value Python cannot read
                # (stored before timestamps were checked) does not stop the rebuild.
                Run.objects.filter(pk=pk).update(started_at=None, ended_at=None)
                run = Run.objects.select_for_update().select_related("project").get(pk=pk)
                events = _load_checked_events(run, label, found)
                if events:
                    do_write_projections([run], {run.pk: events}, replace=[run.pk])
                else:
                    found.append(f"{label}: no valid event left; its projections are empty")
                    _delete_projections([run.pk])
        except Exception as exc:
            if _is_outage(exc):
                raise
            log.exception("rebuild_projections: %s failed", label)
            found.append(f"{label}: not rebuilt ({type(exc).__name__}: {_printable(str(exc), 300)})")
            continue
        count += 1
    return count


def _load_checked_events(run: Run, label: str, problems: list[str]) -> list[TraceEvent]:
    """Every stored event of `run` that passes `check_event` today; the others are reported."""
    out: list[TraceEvent] = []
    rows = Event.objects.filter(project_id=run.project_id, run_id=run.run_id).values_list(
        "pk", "step_id", "raw"
    )
    for pk, sid, raw in rows.iterator(chunk_size=2000):
        try:
            out.append(check_event(json.loads(raw)))
        except TraceFormatError as exc:
            problems.append(f"{label}: event {pk} ({_printable(sid, 60)}) left out: {exc.reason}")
        except (ValueError, RecursionError) as exc:
            problems.append(
                f"{label}: event {pk} ({_printable(sid, 60)}) left out: not readable JSON ({exc})"
            )
    return out


def _delete_projections(run_pks: list[int]) -> None:
    # Children first; `_raw_delete` is one DELETE per table with no collector round trips, which is
    # safe because nothing else points at these rows and they have no signals.
    for model in (ContextDecision, PrimitiveEvent, Pin, Step, Turn):
        qs = model.objects.filter(run_id__in=run_pks)
        qs._raw_delete(qs.db)


def do_write_projections(
    runs: list[Run],
    events_of: dict[int, list[TraceEvent]],
    *,
    replace: list[int],
    projected: Sequence[_Projection] = (),
    tally: bool = False,
    continued: Sequence[tuple[Run, _Projection]] = (),
) -> None:
    """Replace the projection rows of `runs` with ones computed from `events_of[run.pk]`.

    Must run inside a transaction holding the runs' row locks. `replace` names the runs that may have
    projection rows already (they are deleted first); the others are known to have none. `projected`,
    when given, holds the projections of the first runs (`project_run` of their events), computed
    already. `tally`: `events_of` holds every stored event of each run, so the runs' `tally` is written
    (`whole_run_tally`) for their next live batches. `continued`: runs projected turn by turn whose
    new rows and counters are written here too (`do_project_turns`'s `deferred`)."""
    if replace:
        _delete_projections(replace)
    projections = [*projected, *(project_run(events_of[run.pk]) for run in runs[len(projected) :])]
    now = timezone.now()
    for run, proj in zip(runs, projections, strict=True):
        for key, value in proj.run_fields.items():
            setattr(run, key, value)
        run.updated_at = now
        if tally:
            run.tally = whole_run_tally(events_of[run.pk], proj, now)
    items = [*zip(runs, projections, strict=True), *continued]
    _insert_projections(items, update=[run for run, _ in items])
