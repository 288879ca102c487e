"""Bulk writes: PostgreSQL COPY (and one-statement inserts) of raw events and projection rows,
`bulk_create` elsewhere. A helper of the store-raw and project stages, no stage of its own; the COPY
text itself is `copytext`'s."""

from __future__ import annotations

import contextlib
import functools
import json
import math
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import msgspec
from django.db import connection, models

from traces.core import prepared
from traces.ingest.copytext import copy_statement, event_copy_text, model_columns, msgspec_text
from traces.models import (
    ContextDecision,
    Event,
    Pin,
    PrimitiveEvent,
    Run,
    Step,
    Turn,
)

if TYPE_CHECKING:
    from traces.ingest.projection import Projection

_RUN_FIELDS = (
    "source agents model status started_at ended_at turns steps events prompt_tokens completion_tokens "
    "tokens tool_calls errors failure bundle_id delegated_by_run_id primitives recall_count pin_count unpin_count "
    "peak_utilization incremental name tags "
    "updated_at tally"
).split()


def insert_projections(
    items: list[tuple[Run, Projection]],
    *,
    update: list[Run] | None = None,
    ids: list[list[int]] | None = None,
) -> None:
    """Insert the turn, step, decision, primitive and pin rows of each (run, projection), after writing
    the counters of the runs in `update` (`update_runs`; on PostgreSQL in the same round trip as the
    new rows' ids when there are any). `ids`: the turn and step rows' ids, taken already (PostgreSQL,
    `id_arrays`); the counters then go with a small batch's rows."""
    turns: list[dict[str, Any]] = []
    for run, proj in items:
        run_pk = run.pk  # a property of Django's (a lookup each time): once per run, not per row
        for t in proj.turns:
            t["run_id"] = run_pk
            turns.append(t)
    n_steps = sum(len(proj.steps) for _, proj in items)
    n_rows = len(turns) + n_steps + sum(len(p.decisions) + len(p.primitives) + len(p.pins) for _, p in items)
    postgres = connection.vendor == "postgresql"
    # A small batch (a live stream's) is written with ONE statement (`_insert_small`); a large one
    # with a COPY per table (`_CopyChain`: each table's text built while the previous one is stored),
    # but for its turn rows, which go with their ids (`_allocate_ids`).
    small = postgres and n_rows <= SMALL_BATCH_ROWS
    carried: list[Run] = []  # runs whose counters go with the rows (`_insert_small`)
    turns_written = False  # the turn rows went with their ids (`_allocate_ids`)
    if ids is not None:
        if small and n_rows:
            carried = update or []
        else:
            update_runs(update or [])
    else:
        if not n_rows or not postgres or not (turns or n_steps):
            update_runs(update or [])
        if n_rows:
            # PostgreSQL: the ids of both tables from their sequences in one round trip, before the
            # writes (with the runs' counters, `update_runs`, and a large batch's turn rows).
            turns_written = postgres and not small and bool(turns)
            ids = (
                _allocate_ids(
                    [(Turn, len(turns)), (Step, n_steps)],
                    update=update or [],
                    first_rows=turns if turns_written else None,
                )
                if postgres and (turns or n_steps)
                else [[], []]
            )
    if n_rows and ids is not None:
        _insert_rows(items, turns, ids, small=small, turns_written=turns_written, carried=carried)


def _insert_rows(
    items: list[tuple[Run, Projection]],
    turns: list[dict[str, Any]],
    ids: list[list[int]],
    *,
    small: bool,
    turns_written: bool,
    carried: list[Run],
) -> None:
    """`insert_projections`' rows, their ids known (PostgreSQL) or taken as they are written: each
    step linked to its turn's id and each decision and primitive to its step's, then written."""
    postgres = connection.vendor == "postgresql"
    with _CopyChain() as chain:

        def with_ids(
            model: type[models.Model], rows: list[dict[str, Any]], allocated: list[int]
        ) -> list[int]:
            """Write `rows` now (a large batch) or with the rest (a small one); their ids."""
            if small or (model is Turn and turns_written):
                return allocated
            if postgres:
                chain.send(model, rows, allocated)
                return allocated
            return fast_insert(model, rows, need_ids=True)

        turn_ids = with_ids(Turn, turns, ids[0])
        steps: list[dict[str, Any]] = []
        base = 0
        for run, proj in items:
            run_pk = run.pk
            for t_index, step in proj.steps:
                step["run_id"] = run_pk
                step["turn_id"] = turn_ids[base + t_index]
                steps.append(step)
            base += len(proj.turns)
        step_ids = with_ids(Step, steps, ids[1])
        decisions: list[dict[str, Any]] = []
        primitives: list[dict[str, Any]] = []
        pins: list[dict[str, Any]] = []
        base = 0
        for run, proj in items:
            run_pk = run.pk
            for s_index, decision in proj.decisions:
                decision["run_id"] = run_pk
                decision["step_id"] = step_ids[base + s_index]
                decisions.append(decision)
            for s_index_or_none, prim in proj.primitives:
                prim["run_id"] = run_pk
                prim["step_id"] = step_ids[base + s_index_or_none] if s_index_or_none is not None else None
                primitives.append(prim)
            for pin in proj.pins:
                pin["run_id"] = run_pk
                pins.append(pin)
            base += len(proj.steps)
        if small:
            _insert_small(
                [(Turn, turns, ids[0]), (Step, steps, ids[1]), (ContextDecision, decisions, None),
                 (PrimitiveEvent, primitives, None), (Pin, pins, None)],
                update=carried,
            )  # fmt: skip
            return
        for model, rows in ((ContextDecision, decisions), (PrimitiveEvent, primitives), (Pin, pins)):
            if postgres:
                chain.send(model, rows)
            else:
                fast_insert(model, rows)


#: Rows (all tables together) up to which a batch's projection rows are written by one INSERT
#: statement instead of a COPY per table. A COPY costs two round trips (start, then data and end) and
#: its own statement; a live stream's batch of 20 events makes ~15 rows in 4 tables: 8 round trips
#: became 1 (bench/ingest.py --stream). Larger batches keep COPY, which is cheaper per row.
SMALL_BATCH_ROWS = 200


def _insert_small(
    tables: list[tuple[type[models.Model], list[dict[str, Any]], list[int] | None]],
    *,
    update: Sequence[Run] = (),
) -> None:
    """PostgreSQL: insert the rows of several tables with ONE statement: each table's rows go as one
    JSON text parameter, expanded by `json_populate_recordset` (data-modifying CTEs; projection rows
    carry no foreign-key constraint, so a step and its turn may go together). `ids`, when given, are the
    rows' primary keys (from `_allocate_ids`). One JSON text per table costs less CPU than a
    parameter per value (psycopg quotes each one in Python) and than a COPY's two round trips. The
    counters of the runs in `update` are written by the same statement (`update_runs`)."""
    parts: list[str] = []
    params: list[Any] = []
    if update:
        update_sql, update_params = _update_runs_statement(list(update))
        parts.append(update_sql)
        params += update_params
    for model, rows, ids in tables:
        if not rows:
            continue
        insert_sql, text = _rows_insert(model, rows, ids=ids)
        parts.append(insert_sql)
        params.append(text)
    if not parts:
        return
    sql = parts[-1]
    if len(parts) > 1:
        sql = "WITH " + ", ".join(f"i{k} AS ({p})" for k, p in enumerate(parts[:-1])) + " " + parts[-1]
    with prepared.cursor() as cursor:
        cursor.execute(sql, params)


def _rows_insert(
    model: type[models.Model],
    rows: list[dict[str, Any]],
    *,
    ids: list[int] | None = None,
    id_array: str | None = None,
) -> tuple[str, str]:
    """PostgreSQL: an INSERT of `rows` (dicts by attname) from one JSON text parameter, expanded by
    `json_populate_recordset`, and that text. The primary keys: `ids` (one per row), or the i-th
    element of the SQL array `id_array` for the i-th row (ids taken in the same statement), or the
    table's default."""
    _fit_ints(model, rows)
    attnames, columns, _ = model_columns(model)
    if ids is not None:
        for row, pk in zip(rows, ids, strict=True):
            row["id"] = pk
        attnames, columns = ("id", *attnames), (model._meta.pk.column, *columns)
    if attnames != columns:
        rows = [{c: row[a] for a, c in zip(attnames, columns, strict=True)} for row in rows]
    qn = connection.ops.quote_name
    table = qn(model._meta.db_table)
    cols = ", ".join(qn(c) for c in columns)
    if id_array is None:
        sql = f"INSERT INTO {table} ({cols}) SELECT {cols} FROM json_populate_recordset(NULL::{table}, %s)"
    else:
        values = ", ".join(f"j.{qn(c)}" for c in columns)
        sql = (
            f"INSERT INTO {table} ({qn(model._meta.pk.column)}, {cols}) SELECT ({id_array})[j.ordinality], "
            f"{values} FROM json_populate_recordset(NULL::{table}, %s) WITH ORDINALITY AS j"
        )
    return sql, json_rows(rows, model)


def _json_default(value: Any) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


_json_rows_text = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=_json_default).encode


def json_rows(rows: list[dict[str, Any]], model: type[models.Model]) -> str:
    """Rows of `model` as one JSON text, a statement's parameter for `json_populate_recordset`.

    Encoded by msgspec (about a quarter of `json`'s time: a live batch's rows, a continued run's
    projection rows), unless it would write a value `json` writes otherwise (`_msgspec_safe`) or
    refuses one (a lone surrogate, which validation refuses too); `json` then writes them. The texts
    differ only in how an instant is spelled (`Z` or `+00:00`), which PostgreSQL reads alike
    (tests/traces/ingest/test_json_rows.py reads both back through PostgreSQL)."""
    if _msgspec_safe(rows, _checked_columns(model)):
        try:
            return msgspec_text(rows).decode()
        except (TypeError, OverflowError, UnicodeEncodeError, msgspec.EncodeError):
            pass
    return _json_rows_text(rows)


def _msgspec_safe(rows: list[dict[str, Any]], columns: tuple[str, ...]) -> bool:
    """False when a row's date/time or float column holds what msgspec writes differently from `json`:
    an instant whose UTC offset is not whole minutes (msgspec writes the offset to the minute, moving
    the instant: an event time at `-00:16:08`), a naive one, or a float that is not finite (msgspec
    writes `null`). Only those columns are looked at: the rest are strings, integers, booleans and
    JSON values from validated events, which both write alike."""
    for row in rows:
        for key in columns:
            value = row.get(key)
            if value is None:
                continue
            if value.__class__ is float:
                if not math.isfinite(value):
                    return False
            elif isinstance(value, datetime):
                offset = value.utcoffset()
                if offset is None or offset.seconds % 60 or offset.microseconds:
                    return False
    return True


@functools.cache
def _checked_columns(model: type[models.Model]) -> tuple[str, ...]:
    """The keys (attribute and column names) of `model`'s date/time and float fields."""
    kinds = (models.DateTimeField, models.FloatField)
    fields = [f for f in model._meta.concrete_fields if isinstance(f, kinds)]
    return tuple(sorted({name for f in fields for name in (f.attname, f.column)}))


def update_runs(runs: list[Run]) -> None:
    """Write the projected counters of `runs`. PostgreSQL: one UPDATE joined to the rows given as one
    JSON text (`json_populate_recordset`), as `_insert_small` inserts; elsewhere one UPDATE per run,
    sent as one executemany.

    Why one JSON text: a parameter per column per run cost more CPU than the statement (Django's
    `get_db_prep_save` and psycopg's quoting of each value, in Python)."""
    if not runs:
        return
    if connection.vendor == "postgresql":
        sql, params = _update_runs_statement(runs)
        with prepared.cursor() as cursor:
            cursor.execute(sql, params)
        return
    fields = [_column_field(Run, name) for name in _RUN_FIELDS]
    qn = connection.ops.quote_name
    table = qn(Run._meta.db_table)
    rows = [{f.attname: getattr(run, f.attname) for f in fields} for run in runs]
    _fit_ints(Run, rows)
    sets = ", ".join(f"{qn(f.column)} = %s" for f in fields)
    sql = f"UPDATE {table} SET {sets} WHERE id = %s"
    params = [
        [f.get_db_prep_save(row[f.attname], connection) for f in fields] + [run.pk]
        for run, row in zip(runs, rows, strict=True)
    ]
    with connection.cursor() as cursor:
        cursor.executemany(sql, params)


def _update_runs_statement(runs: list[Run]) -> tuple[str, list[Any]]:
    """PostgreSQL: `update_runs`'s UPDATE of `runs` and its parameters (the rows as one JSON text, and
    their ids).

    The ids are also given as an array the primary key is matched against: joined only to the
    function's rows (which the planner takes for 100), the runs table was read whole (a sequential scan
    of every project's runs, 0.4 ms a batch at 2,250 runs and growing with the table)."""
    fields = [_column_field(Run, name) for name in _RUN_FIELDS]
    qn = connection.ops.quote_name
    table = qn(Run._meta.db_table)
    rows = [{f.attname: getattr(run, f.attname) for f in fields} for run in runs]
    _fit_ints(Run, rows)
    by_column = [
        {"id": run.pk, **{f.column: row[f.attname] for f in fields}}
        for run, row in zip(runs, rows, strict=True)
    ]
    sets = ", ".join(f"{qn(f.column)} = j.{qn(f.column)}" for f in fields)
    sql = (
        f"UPDATE {table} AS r SET {sets} FROM json_populate_recordset(NULL::{table}, %s) AS j "
        f"WHERE r.{qn('id')} = j.{qn('id')} AND r.{qn('id')} = ANY(%s::bigint[])"
    )  # noqa: S608  (names are ours; values are parameters)
    return sql, [json_rows(by_column, Run), [run.pk for run in runs]]


def id_arrays(wanted: list[tuple[type[models.Model], int]]) -> tuple[list[str], list[Any]]:
    """PostgreSQL: SQL expressions (and their parameters) giving `n` new primary keys of each model, as
    an array each, for the select list of a statement that has other work to do.

    The sequence is looked up once per array (a sub-select, evaluated once), not once per key: as an
    argument of `nextval` itself, `pg_get_serial_sequence` ran for every row of the series, half of
    the statement's time (160 keys: 0.61 -> 0.28 ms a statement here)."""
    cols = [
        "ARRAY(SELECT nextval((SELECT pg_get_serial_sequence(%s, %s)::regclass)) "
        "FROM generate_series(1, (SELECT %s::int)))"
    ] * len(wanted)
    return cols, [v for model, n in wanted for v in (model._meta.db_table, model._meta.pk.column, n)]


def _allocate_ids(
    wanted: list[tuple[type[models.Model], int]],
    *,
    update: Sequence[Run] = (),
    first_rows: list[dict[str, Any]] | None = None,
) -> list[list[int]]:
    """PostgreSQL: `n` new primary keys from each model's sequence, all in one query — which also
    writes the counters of the runs in `update` (`update_runs`, as a data-modifying CTE: one round
    trip instead of two) and, given `first_rows`, inserts them as rows of the first model with its
    new keys in order (`_rows_insert`).

    Why insert a large batch's turn rows here: a COPY costs two round trips and a statement of its
    own, more than its ~30 rows (turns of mix (a) of bench/ingest.py: PostgreSQL's CPU for their COPY
    0.28 ms a batch, against 0.09 ms in a COPY of 100 batches' rows at once)."""
    cols, id_params = id_arrays(wanted)
    ctes: list[str] = []
    params: list[Any] = []
    if update:
        update_sql, update_params = _update_runs_statement(list(update))
        ctes.append(f"u AS ({update_sql})")
        params += update_params
    if first_rows:
        # The keys are taken once (a CTE referenced twice is computed once) and handed to the insert.
        ctes.append("k AS (SELECT " + ", ".join(f"{c} AS a{i}" for i, c in enumerate(cols)) + ")")
        params += id_params
        insert_sql, text = _rows_insert(wanted[0][0], first_rows, id_array="(SELECT a0 FROM k)")
        ctes.append(f"i AS ({insert_sql})")
        params.append(text)
        sql = "SELECT " + ", ".join(f"a{i}" for i in range(len(cols))) + " FROM k"
    else:
        sql = "SELECT " + ", ".join(cols)
        params += id_params
    if ctes:
        sql = "WITH " + ", ".join(ctes) + " " + sql
    with prepared.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    return [list(ids) for ids in row]


_INTEGER_FIELDS = frozenset(
    {"SmallIntegerField", "IntegerField", "BigIntegerField", "PositiveSmallIntegerField",
     "PositiveIntegerField", "PositiveBigIntegerField"}
)  # fmt: skip


@functools.cache
def _int_bounds(model: type[models.Model]) -> tuple[tuple[str, int, int, bool], ...]:
    """(attname, lowest, highest, nullable) of each integer column of `model` whose range the
    database enforces (PostgreSQL; SQLite enforces none)."""
    out: list[tuple[str, int, int, bool]] = []
    for f in model._meta.concrete_fields:
        if f.primary_key or f.get_internal_type() not in _INTEGER_FIELDS:
            continue
        lo, hi = connection.ops.integer_field_range(f.get_internal_type())
        if lo is not None and hi is not None:
            out.append((f.attname, lo, hi, f.null))
    return tuple(out)


def _fit_ints(model: type[models.Model], rows: list[dict[str, Any]]) -> None:
    """Bring every integer of `rows` into its column's range, in place: a value no column holds
    becomes unknown (null) where the column allows it, else the nearest bound.

    Why: validation lets integers up to ±(2**53 − 1) through (they are valid JSON, stored as sent in
    the raw event), but a projection puts some of them in 32-bit columns (a decision's budgets, a
    step's latency, a pin's tokens) or sums them; PostgreSQL would refuse the whole batch. The raw
    event keeps the exact value; only the projected number is bounded. About 1–2 µs a row, under 1 µs
    per event of bench/ingest.py mix (a) (a step, primitive or turn row for every few events)."""
    bounds = _int_bounds(model)
    if not bounds:
        return
    for row in rows:
        for name, lo, hi, nullable in bounds:
            v = row.get(name)
            if type(v) is int and not lo <= v <= hi:
                row[name] = None if nullable else (lo if v < lo else hi)


def _column_field(model: type[models.Model], name: str) -> models.Field[Any, Any]:
    """`model`'s field `name`, which must be a concrete column (not a reverse relation)."""
    field = model._meta.get_field(name)
    assert isinstance(field, models.Field), f"{model.__name__}.{name} is not a column"
    return field


def fast_insert(
    model: type[models.Model],
    rows: list[dict[str, Any]],
    *,
    need_ids: bool = False,
    ids: list[int] | None = None,
) -> list[int]:
    """Insert row dicts (every non-pk attname of `model`) in bulk: PostgreSQL COPY, elsewhere
    `bulk_create`. With `need_ids`, returns the new primary keys in row order (on PostgreSQL taken
    from the table's sequence in one query, before the COPY, unless `ids` gives them already, from
    `_allocate_ids`); otherwise returns [].

    Why COPY of plain tuples: Django's bulk_create on PostgreSQL sends every column as an array
    parameter, and psycopg's Python-level array quoting of large JSON text took most of the ingest
    time; building a model instance per row cost as much again (measured with bench/ingest.py).
    Model defaults and `save()` are bypassed: callers give complete rows.
    """
    if not rows:
        return []
    _fit_ints(model, rows)
    attnames, columns, json_cols = model_columns(model)
    if connection.vendor != "postgresql":
        objs = [model(**row) for row in rows]
        model._default_manager.bulk_create(objs, batch_size=500)
        return [obj.pk for obj in objs] if need_ids else []
    new_ids: list[int] = []
    if need_ids:
        new_ids = ids if ids is not None else _allocate_ids([(model, len(rows))])[0]
    sql, text = copy_statement(model, rows, new_ids if need_ids else None)
    with connection.cursor() as cursor, cursor.cursor.copy(sql) as cp:
        cp.write(text)
    return new_ids


class _CopyChain:
    """PostgreSQL: COPYs into several tables, one after the other, each table's text built while
    PostgreSQL still stores the previous table's rows (a COPY is ended, and waited for, only when the
    next one is ready to start, or at the end of the block).

    Why: storing a projection's rows (indexes, the WAL) costs PostgreSQL about as much time as building
    the next table's text costs Python; one after the other, a 500-event batch waited for each in turn.
    An error in the block aborts the COPY in progress (and the transaction with it)."""

    def __init__(self) -> None:
        self._open: contextlib.ExitStack | None = None

    def __enter__(self) -> _CopyChain:
        return self

    def __exit__(self, *exc: Any) -> bool:
        open_, self._open = self._open, None
        return bool(open_ is not None and open_.__exit__(*exc))

    def send(
        self, model: type[models.Model], rows: list[dict[str, Any]], ids: list[int] | None = None
    ) -> None:
        """Start the COPY of `rows` into `model` (`fast_insert`'s rows; `ids` their primary keys)."""
        if not rows:
            return
        _fit_ints(model, rows)
        sql, text = copy_statement(model, rows, ids)
        self.__exit__(None, None, None)  # the previous table's COPY ends here
        stack = contextlib.ExitStack()
        cursor = stack.enter_context(connection.cursor())
        self._open = stack
        stack.enter_context(cursor.cursor.copy(sql)).write(text)


EVENT_COLUMNS = (
    "project_id",
    "run_id",
    "step_id",
    "parent_step_id",
    "event_type",
    "agent",
    "timestamp",
    "raw",
    "received_at",
    "turn",
)


@contextlib.contextmanager
def raw_events_written(rows: list[tuple[Any, ...]]) -> Iterator[None]:
    """Write raw event rows (tuples in `EVENT_COLUMNS` order): COPY on PostgreSQL, else bulk_create.
    The block runs once the rows are sent and before their write is waited for (its end waits).

    Why: PostgreSQL stores a COPY's rows (parsing, four indexes, the WAL) as they arrive, ~25 µs a row
    of its own CPU, while the sender waits for the end. Work that needs none of the rows written (a
    new run's projection: its events are all in memory) runs in that wait, on the other core, instead
    of after it: a 500-event batch of a new run answers ~10 ms sooner. An error in the block aborts
    the COPY (and the transaction with it)."""
    if not rows:
        yield
        return
    if connection.vendor != "postgresql":
        Event.objects.bulk_create(
            [Event(**dict(zip(EVENT_COLUMNS, r, strict=True))) for r in rows], batch_size=500
        )
        yield
        return
    columns = ", ".join(connection.ops.quote_name(c) for c in EVENT_COLUMNS)
    if len(rows) <= SMALL_BATCH_ROWS // 4:
        # A live stream's batch: one INSERT (one round trip) instead of COPY's two.
        _insert_small([(Event, [dict(zip(EVENT_COLUMNS, r, strict=True)) for r in rows], None)])
        yield
        return
    with connection.cursor() as cursor, cursor.cursor.copy(f"COPY traces_event ({columns}) FROM STDIN") as cp:
        # `write` returns once the text is handed to the socket; leaving the block ends the COPY and
        # waits for PostgreSQL.
        cp.write(event_copy_text(rows))
        yield


def insert_new_events(rows: list[tuple[Any, ...]]) -> set[tuple[str, str]]:
    """PostgreSQL, a live batch to runs that already have events: insert the rows not stored yet and
    return their (run_id, step_id). The unique (project, run_id, step_id) index is the conflict arbiter,
    probed once per row, whatever the table's statistics say: a live run's rows are newer than them, so
    a duplicate check by query was planned as a scan of the run's every event (growing with the run)."""
    dict_rows = [dict(zip(EVENT_COLUMNS, r, strict=True)) for r in rows]
    _fit_ints(Event, dict_rows)
    qn = connection.ops.quote_name
    table, columns = qn(Event._meta.db_table), ", ".join(qn(c) for c in EVENT_COLUMNS)
    sql = (
        f"INSERT INTO {table} ({columns}) SELECT {columns} FROM json_populate_recordset(NULL::{table}, %s) "
        f"ON CONFLICT ({qn('project_id')}, {qn('run_id')}, {qn('step_id')}) DO NOTHING "
        f"RETURNING {qn('run_id')}, {qn('step_id')}"
    )  # noqa: S608  (names are ours; values are one parameter)
    with prepared.cursor() as cursor:
        cursor.execute(sql, [json_rows(dict_rows, Event)])
        return set(cursor.fetchall())
