"""Model instances read with SQL written once per model, for the read API's hottest requests.

Why: building a queryset and compiling it to SQL cost the ORM ~1–1.5 ms of CPU per query on a small
machine — more than running it. A run read back right after its batch (`GET …/runs/<run_id>`) made
four such queries (its key, the run, the turns, the pins): a third of that request's CPU. Here each
model's column list and converters are worked out once; a read is its SQL, then
`Model.from_db` with the values converted as the ORM's compiler converts them (the same instances, the
same values: tests/traces/core/test_sql_reads.py).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from django.db import connection, models

from traces.core import prepared
from traces.models import Project, Team

M = TypeVar("M", bound=models.Model)

#: Per column: the converters the ORM would apply to the value read (backend's, then the field's).
_Converters = tuple[tuple[Callable[..., Any], ...], ...]


@functools.cache
def _plan(
    model: type[models.Model], vendor: str
) -> tuple[str, tuple[str, ...], _Converters, tuple[Any, ...]]:
    """(the qualified column list, attnames, converters, column expressions) of `model`'s concrete fields."""
    qn = connection.ops.quote_name
    table = model._meta.db_table
    fields = list(model._meta.concrete_fields)
    cols = ", ".join(f"{qn(table)}.{qn(f.column)}" for f in fields)
    exprs = tuple(f.get_col(table) for f in fields)
    converters = tuple(
        tuple(connection.ops.get_db_converters(e) + e.get_db_converters(connection)) for e in exprs
    )
    return cols, tuple(f.attname for f in fields), converters, exprs


def columns(model: type[models.Model]) -> str:
    """`model`'s columns, qualified by its table, in the order `build` reads them."""
    return _plan(model, connection.vendor)[0]


def build(model: type[M], values: Sequence[Any]) -> M:
    """An instance of `model` from a row of `columns(model)`, as the ORM would load it."""
    _, attnames, converters, exprs = _plan(model, connection.vendor)
    out = list(values)
    for i, convs in enumerate(converters):
        if convs:
            v = out[i]
            for conv in convs:
                v = conv(v, exprs[i], connection)
            out[i] = v
    return model.from_db(connection.alias, attnames, out)


def width(model: type[models.Model]) -> int:
    return len(_plan(model, connection.vendor)[1])


def fetch(model: type[M], where_order: str, params: Sequence[Any]) -> list[M]:
    """`model`'s rows matching `where_order` (an SQL `WHERE …` and optional `ORDER BY …` over its table)."""
    table = connection.ops.quote_name(model._meta.db_table)
    sql = f"SELECT {columns(model)} FROM {table} {where_order}"  # noqa: S608  (names are ours)
    with prepared.cursor() as cursor:
        cursor.execute(sql, params)
        return [build(model, row) for row in cursor.fetchall()]


def fetch_joined(
    models_: Sequence[type[models.Model]], from_where: str, params: Sequence[Any]
) -> list[tuple[Any, ...]]:
    """Rows of several models read by one join: `SELECT` the columns of each of `models_` in turn,
    then `from_where` (the SQL's `FROM … JOIN … WHERE …`); each row split into one instance a model."""
    sql = f"SELECT {', '.join(columns(m) for m in models_)} {from_where}"  # noqa: S608  (names are ours)
    bounds, start = [], 0
    for m in models_:
        bounds.append((m, start, start + width(m)))
        start += width(m)
    with prepared.cursor() as cursor:
        cursor.execute(sql, params)
        return [tuple(build(m, row[a:b]) for m, a, b in bounds) for row in cursor.fetchall()]


def fetch_with_team(model: type[M], where: str, params: Sequence[Any]) -> list[M]:
    """`model`'s rows (a model with a `project` foreign key) with their project and its team loaded, as
    `select_related("project__team")` loads them, in one join; `where` (`WHERE …`) may name the three
    tables."""
    qn = connection.ops.quote_name
    table, project_t, team_t = (qn(m._meta.db_table) for m in (model, Project, Team))
    joined = fetch_joined(
        (model, Project, Team),
        f"FROM {table} JOIN {project_t} ON {project_t}.{qn('id')} = {table}.{qn('project_id')} "
        f"JOIN {team_t} ON {team_t}.{qn('id')} = {project_t}.{qn('team_id')} {where}",
        params,
    )
    to_project: Any = model._meta.get_field("project")  # a ForeignKey (the caller's model has one)
    to_team = Project._meta.get_field("team")
    for obj, project, team in joined:
        to_team.set_cached_value(project, team)
        to_project.set_cached_value(obj, project)
    return [obj for obj, _, _ in joined]
