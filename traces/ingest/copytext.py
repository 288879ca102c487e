"""COPY's text format: PostgreSQL COPY lines of raw event and projection rows, and JSON column text.

Used by `traces.ingest.bulk` (the statements) and by nothing else: a helper of the store-raw and project
stages, no stage of its own.
"""

from __future__ import annotations

import enum
import functools
import json
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

import msgspec
from django.db import connection, models


@functools.cache
def model_columns(model: type[models.Model]) -> tuple[tuple[str, ...], tuple[str, ...], tuple[bool, ...]]:
    """(attnames, columns, is_json) of a model's non-primary-key concrete fields."""
    fields = [f for f in model._meta.concrete_fields if not f.primary_key]
    return (
        tuple(f.attname for f in fields),
        tuple(f.column for f in fields),
        tuple(isinstance(f, models.JSONField) for f in fields),
    )


def _enum_value(value: Any) -> Any:
    if isinstance(value, enum.Enum):  # a `TextChoices` member (a run's status, source)
        return value.value
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


msgspec_text = msgspec.json.Encoder(enc_hook=_enum_value).encode


def copy_statement(
    model: type[models.Model], rows: list[dict[str, Any]], ids: list[int] | None
) -> tuple[str, str]:
    """PostgreSQL: the COPY statement of `model` and its text for `rows` (their integers brought into
    range already, `_fit_ints`), with `ids` as their primary keys when given (else the table's default)."""
    attnames, columns, json_cols = model_columns(model)
    if ids is not None:
        columns = (model._meta.pk.column, *columns)
    qn = connection.ops.quote_name
    sql = f"COPY {qn(model._meta.db_table)} ({', '.join(qn(c) for c in columns)}) FROM STDIN"
    line = line_writer(model)
    if ids is None:
        return sql, "".join([line(row) for row in rows])
    return sql, "".join([f"{pk}\t{line(row)}" for pk, row in zip(ids, rows, strict=True)])


#: Per column type, how a generated line writer writes a value of the type expected there (anything
#: else goes through `copy_cell`): the same text as `copy_cell`, without a call per cell. `{v}` is
#: the value; the characters COPY escapes are written by `repr`.
_SPECIAL = " or ".join(f"{c!r} in {{v}}" for c in ("\\", "\n", "\r", "\t"))
_NULL, _TAB, _NEWLINE = repr("\\N"), repr("\t"), repr("\n")
_FAST_CELLS: tuple[tuple[type[models.Field[Any, Any]], str], ...] = (
    (models.JSONField, f"({_NULL} if {{v}} is None else _text(dumps({{v}})))"),
    (models.CharField, f"({{v}} if {{v}}.__class__ is str and not ({_SPECIAL}) else _cell({{v}}))"),
    (models.TextField, f"({{v}} if {{v}}.__class__ is str and not ({_SPECIAL}) else _cell({{v}}))"),
    (models.IntegerField, "(str({v}) if {v}.__class__ is int else _cell({v}))"),
    (models.BooleanField, "(('t' if {v} else 'f') if {v}.__class__ is bool else _cell({v}))"),
    (models.DateTimeField, "({v}.isoformat() if {v}.__class__ is datetime else _cell({v}))"),
)


@functools.cache
def line_writer(model: type[models.Model]) -> Callable[[dict[str, Any]], str]:
    """A function writing a row dict of `model` (its non-pk attnames) as one line of COPY text: what
    `copy_line` writes for its values, a JSON column's value taken as `json_text` gives it.

    Why: `copy_line` calls `copy_cell` per cell, which tries each type in turn; a 500-event batch's
    projection rows are ~5,000 cells. Generated once per model, with the column's own type tried
    first, inline."""
    attnames, _, _ = model_columns(model)
    fields = {f.attname: f for f in model._meta.concrete_fields}
    body: list[str] = []
    cells: list[str] = []
    for i, name in enumerate(attnames):
        template = next((t for kind, t in _FAST_CELLS if isinstance(fields[name], kind)), "_cell({v})")
        body.append(f"    v{i} = row[{name!r}]\n")
        cells.append(template.format(v=f"v{i}"))
    code = f"def line(row):\n{''.join(body)}    return {_TAB}.join(({', '.join(cells)},)) + {_NEWLINE}\n"
    scope: dict[str, Any] = {"_cell": copy_cell, "_text": copy_text, "dumps": dumps, "datetime": datetime}
    exec(compile(code, f"<COPY line of {model.__name__}>", "exec"), scope)  # noqa: S102  (our code, our field names)
    line: Callable[[dict[str, Any]], str] = scope["line"]
    return line


def event_copy_text(rows: list[tuple[Any, ...]]) -> str:
    """`copy_line` of every raw event row, with the column types known (the same text, about half
    the time: no per-cell dispatch, and `received_at` is the same for the whole batch). An event's
    time is a datetime, or its own text when that is plain UTC (`storing.utc_text`: no character
    COPY escapes)."""
    esc, null = copy_text, "\\N"
    received: dict[datetime, str] = {}
    out: list[str] = []
    for project_id, rid, sid, parent, kind, agent, ts, raw, recv, turn in rows:
        r = received.get(recv)
        if r is None:
            r = received[recv] = recv.isoformat()
        out.append(
            f"{project_id}\t{esc(rid)}\t{esc(sid)}\t{null if parent is None else esc(parent)}\t{esc(kind)}\t"
            f"{esc(agent)}\t{ts if ts.__class__ is str else ts.isoformat()}\t{esc(raw)}\t{r}\t"
            f"{null if turn is None else turn}\n"
        )
    return "".join(out)


def copy_text(v: str) -> str:
    if "\\" in v or "\n" in v or "\r" in v or "\t" in v:
        return v.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    return v


def copy_cell(v: Any) -> str:
    """One value in COPY's text format. Why not psycopg's `write_row`: it cost ~11 µs a row in Python,
    the largest single item of a batch's write (bench/ingest.py); this is a few µs."""
    cls = v.__class__
    if cls is str:
        if "\\" in v or "\n" in v or "\r" in v or "\t" in v:
            return v.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
        return v
    if v is None:
        return "\\N"
    if cls is int:
        return str(v)
    if cls is bool:
        return "t" if v else "f"
    if cls is datetime:
        return v.isoformat()
    if cls is float:
        if v != v:
            return "NaN"
        if v in (float("inf"), float("-inf")):
            return "Infinity" if v > 0 else "-Infinity"
        return repr(v)
    return copy_cell(str(v))


def copy_line(values: Iterable[Any]) -> str:
    return "\t".join([copy_cell(v) for v in values]) + "\n"


def json_text(value: Any) -> str | None:
    return None if value is None else dumps(value)


_encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def dumps(value: Any) -> str:
    """A JSON column's value as JSON text: msgspec's text, else (a value msgspec refuses: a lone
    surrogate, a key that is not a string or an integer, a cycle, an object JSON has no form for) what
    `_encoder` writes, or its error.

    Why msgspec: about a tenth of `json`'s time (1.2-1.6 us a value here, for ~62,500 values per
    50,000 events of bench/ingest.py mix (a)). The two texts hold the same JSON value; only a float's
    exponent is spelled otherwise (`1e16`, `1e+16`), which PostgreSQL reads alike (jsonb keeps the
    value). msgspec writes a NaN or an infinity as null, where `json` writes what no JSON reader
    takes: a stored event holds neither (validation refuses them), and the projection computes no
    float of its own into a JSON column."""
    try:
        return msgspec_text(value).decode()
    except (TypeError, ValueError, OverflowError, RecursionError, msgspec.EncodeError):
        return _encoder.encode(value)
