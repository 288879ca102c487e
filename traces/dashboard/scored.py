"""The dashboard filtered by score (`score.helpfulness>=4`): the same figures as `figures`, summed
from the per-run rollup rows (`RunRollup`) of the runs whose scores match — the runs list's own
conditions (`traces.scores.expressions`, parsed by the runs filter's field), never events or steps.

One read of the matching runs' ids (by the scores' index), then three grouped reads over the range's
matching rows (by day: the sums; by day and duration bucket: the
run histogram; by pool agent: the cost per agent) and one of the matching rows' step-latency
histograms and cost by model (merged here: a row holds a handful of buckets and models). The rows
it returns have the shape of `DailyRollup` rows, so `figures` draws them as it draws those."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.db import connection
from django.db.models import BooleanField, Count, Q, QuerySet, Sum
from django.db.models.expressions import RawSQL

from traces.dashboard import histograms
from traces.dashboard.filters import DashboardFilter
from traces.models import ALL_AGENTS, Run, RunRollup
from traces.scores import expressions

#: Sums of `RunRollup` columns, named as `DailyRollup`'s.
_SUMMED = (
    "failed", "running", "steps", "prompt_tokens", "completion_tokens", "cached_tokens", "cost_usd",
    "unpriced_tokens", "compactions", "lost_instructions", "pins", "recalls",
)  # fmt: skip
#: Runs with any of these (`DailyRollup.runs_compacted`…).
_RUNS_WITH = {
    "runs_compacted": "compactions",
    "runs_lost": "lost_instructions",
    "runs_pinned": "pins",
    "runs_recalled": "recalls",
}


def matching_runs(project_id: int, f: DashboardFilter) -> QuerySet[Run]:
    """The project's runs of the range whose scores satisfy every condition of `f.score`."""
    start = dt.datetime.combine(f.first, dt.time.min, tzinfo=dt.UTC)
    end = dt.datetime.combine(f.last + dt.timedelta(days=1), dt.time.min, tzinfo=dt.UTC)
    runs = Run.objects.filter(project_id=project_id, started_at__gte=start, started_at__lt=end)
    return expressions.apply(runs, list(f.score))


def _scope(project_id: int, f: DashboardFilter) -> QuerySet[RunRollup]:
    """The range's run rows of the matching runs. The matching runs are read first, by the scores'
    index (a few thousand ids): as a subquery, the planner probed it once per run row of the range
    instead. On PostgreSQL the ids go as one array parameter (any number of them)."""
    qs = RunRollup.objects.filter(project_id=project_id, day__gte=f.first, day__lte=f.last)
    pks = list(matching_runs(project_id, f).values_list("pk", flat=True))
    if connection.vendor == "postgresql":
        qs = qs.filter(RawSQL('"traces_runrollup"."run_id" = ANY(%s)', (pks,), output_field=BooleanField()))
    else:
        qs = qs.filter(run_id__in=matching_runs(project_id, f).values("pk"))
    if f.model:
        qs = qs.filter(model=f.model)
    if f.source:
        qs = qs.filter(source=f.source)
    return qs


def _sums() -> dict[str, Any]:
    """The aggregates, named `s_<name>` (an annotation named as a column would shadow it)."""
    out: dict[str, Any] = {"s_runs": Count("id")}
    out.update({f"s_{name}": Sum(name) for name in _SUMMED})
    out.update({f"s_{name}": Count("id", filter=Q(**{f"{col}__gt": 0})) for name, col in _RUNS_WITH.items()})
    return out


def _named(row: dict[str, Any]) -> dict[str, Any]:
    return {
        (k[2:] if k.startswith("s_") else k): (v or 0) if k.startswith("s_") else v for k, v in row.items()
    }


def _merge_models(into: dict[str, list[Any]], by_model: dict[str, list[Any]] | None) -> None:
    for model, (steps, p, c, k, cost) in (by_model or {}).items():
        e = into.setdefault(model, [0, 0, 0, 0, None])
        e[0], e[1], e[2], e[3] = e[0] + steps, e[1] + p, e[2] + c, e[3] + k
        if cost is not None:
            e[4] = (e[4] or 0.0) + cost


def rows(project_id: int, f: DashboardFilter) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Per day, the figures of the matching runs (`DailyRollup`-shaped rows: the sums, `run_ms`,
    `step_ms`, `by_model`); and per pool agent, their sums (for the cost per agent)."""
    scope = _scope(project_id, f)
    main = scope.filter(agent=f.agent or ALL_AGENTS)
    days: dict[dt.date, dict[str, Any]] = {}
    for r in main.values("day").annotate(**_sums()).order_by():
        days[r["day"]] = {**_named(r), "run_ms": {}, "step_ms": {}, "by_model": {}, "computed_at": None}
    for day, bucket, n in (
        main.filter(run_bucket__isnull=False)
        .values_list("day", "run_bucket")
        .annotate(n=Count("id"))
        .order_by()
    ):
        days[day]["run_ms"][str(bucket)] = n
    for day, step_ms, by_model in (
        main.filter(steps__gt=0).values_list("day", "step_ms", "by_model").order_by()
    ):
        histograms.merge_into(days[day]["step_ms"], step_ms)
        _merge_models(days[day]["by_model"], by_model)
    agents = scope.exclude(agent=ALL_AGENTS)
    if f.agent:
        agents = agents.filter(agent=f.agent)
    agent_rows = [_named(r) for r in agents.values("agent").annotate(**_sums()).order_by()]
    return [days[d] for d in sorted(days)], agent_rows
