"""The dashboard filtered by score (`score.helpfulness>=4`): the same figures as `figures`, summed
from the per-run rollup rows (`RunRollup`) of the runs whose scores match — the runs list's own
conditions (`traces.scores.expressions`, parsed by the runs filter's field), never events or steps.

One read of the matching runs' ids (by the scores' index), then one of their rows (a few per run),
summed here per day and per pool agent. The rows
it returns have the shape of `DailyRollup` rows, so `figures` draws them as it draws those."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.db import connection
from django.db.models import BooleanField, QuerySet
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
    """The run rows of the matching runs. The matching runs are read first, by the scores' index (a
    few thousand ids): as a subquery, the planner probed it once per run row of the range instead.
    On PostgreSQL the ids go as one array parameter (any number of them), walked through the
    (run, agent) index alone — the ids already hold the project and the range."""
    if connection.vendor == "postgresql":
        pks = list(matching_runs(project_id, f).values_list("pk", flat=True))
        qs = RunRollup.objects.filter(
            RawSQL('"traces_runrollup"."run_id" = ANY(%s)', (pks,), output_field=BooleanField())
        )
    else:
        qs = RunRollup.objects.filter(run_id__in=matching_runs(project_id, f).values("pk"))
    if f.model:
        qs = qs.filter(model=f.model)
    if f.source:
        qs = qs.filter(source=f.source)
    return qs


def _merge_models(into: dict[str, list[Any]], by_model: dict[str, list[Any]] | None) -> None:
    for model, (steps, p, c, k, cost) in (by_model or {}).items():
        e = into.setdefault(model, [0, 0, 0, 0, None])
        e[0], e[1], e[2], e[3] = e[0] + steps, e[1] + p, e[2] + c, e[3] + k
        if cost is not None:
            e[4] = (e[4] or 0.0) + cost


_COLUMNS = ("day", "agent", "run_bucket", "step_ms", "by_model", *_SUMMED)


def _row(day: dt.date | None = None, agent: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {"day": day, "agent": agent, "runs": 0, "computed_at": None}
    out.update(dict.fromkeys((*_SUMMED, *_RUNS_WITH), 0))
    out.update(run_ms={}, step_ms={}, by_model={})
    return out


def rows(project_id: int, f: DashboardFilter) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Per day, the figures of the matching runs (`DailyRollup`-shaped rows: the sums, `run_ms`,
    `step_ms`, `by_model`); and per pool agent, their sums (for the cost per agent). One read of
    the matching runs' rows (a few per run), summed here."""
    wanted = f.agent or ALL_AGENTS
    days: dict[dt.date, dict[str, Any]] = {}
    agents: dict[str, dict[str, Any]] = {}
    for values in _scope(project_id, f).values_list(*_COLUMNS).order_by():
        r = dict(zip(_COLUMNS, values, strict=True))
        targets = []
        if r["agent"] == wanted:
            targets.append(days.setdefault(r["day"], _row(r["day"])))
        if r["agent"] != ALL_AGENTS and (not f.agent or r["agent"] == f.agent):
            targets.append(agents.setdefault(r["agent"], _row(agent=r["agent"])))
        for t in targets:
            t["runs"] += 1
            for name in _SUMMED:
                t[name] += r[name] or 0
            for name, col in _RUNS_WITH.items():
                t[name] += (r[col] or 0) > 0
        if r["agent"] == wanted:
            t = days[r["day"]]
            if r["run_bucket"] is not None:
                key = str(r["run_bucket"])
                t["run_ms"][key] = t["run_ms"].get(key, 0) + 1
            histograms.merge_into(t["step_ms"], r["step_ms"])
            _merge_models(t["by_model"], r["by_model"])
    return [days[d] for d in sorted(days)], list(agents.values())
