"""A project's price table: `runtime.pricing`'s dated defaults with the project's own prices
(`ModelPrice`, set by admins) over them, and the cost of steps, turns and runs read from their rows.

Costs are worked out when read (a price change shows at once on every page); the dashboard's
per-day costs are kept in its rollups, which a price change marks for a new computation
(`traces.dashboard.actions`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db.models import Sum

from runtime.pricing import CostSummary, Price, PriceTable
from traces.core import sqlread
from traces.core.runcache import by_run_state, many_by_run_state
from traces.models import ModelPrice, Step

_PRICES_WHERE = 'WHERE "traces_modelprice"."project_id" = %s'


def _price(row: ModelPrice) -> Price:
    cached = row.cached_input_per_million
    return Price(
        float(row.input_per_million),
        float(row.output_per_million),
        None if cached is None else float(cached),
        row.updated_at.date().isoformat(),
        "set for this project",
    )


def project_table(project_id: int) -> PriceTable:
    """The defaults with the project's own prices over them (one query of a small table: read on
    every page, so a change shows at once on every web process)."""
    rows = sqlread.fetch(ModelPrice, _PRICES_WHERE, [project_id])  # SQL written once (`traces.core.sqlread`)
    return PriceTable(overrides={row.model: _price(row) for row in rows})


def step_rows(steps: Iterable[Any]) -> list[tuple[str, int, int, int]]:
    """(model, prompt, completion, cached) of step rows (or anything with those attributes)."""
    return [
        (s.model or "", s.prompt_tokens or 0, s.completion_tokens or 0, getattr(s, "cached_tokens", 0) or 0)
        for s in steps
    ]


def run_models(run_pks: list[int], agent: str | None = None) -> dict[int, list[tuple[str, int, int, int]]]:
    """Per run, its steps' tokens summed per model (one grouped query over the runs' steps)."""
    qs = Step.objects.filter(run_id__in=run_pks)
    if agent is not None:
        qs = qs.filter(agent=agent)
    out: dict[int, list[tuple[str, int, int, int]]] = {pk: [] for pk in run_pks}
    grouped = qs.values("run_id", "model").annotate(
        p=Sum("prompt_tokens"), c=Sum("completion_tokens"), k=Sum("cached_tokens")
    )
    for row in grouped.order_by():
        out.setdefault(row["run_id"], []).append(
            (row["model"] or "", row["p"] or 0, row["c"] or 0, row["k"] or 0)
        )
    return out


def attach_run_costs(runs: list[Any]) -> None:
    """Give each run of a page (the runs list) `cost_summary`: per project of the page its prices (one
    query) and its runs' tokens per model, kept by each run's state (one grouped query for the others).
    The runs' conversations are attached already (`Run.is_updating` reads them)."""
    by_project: dict[int, list[Any]] = {}
    for run in runs:
        by_project.setdefault(run.project_id, []).append(run)
    for project_id, group in by_project.items():
        table = project_table(project_id)
        # Kept by each run's state, as on its run page (`run_cost`); the rest in one grouped query.
        sums = many_by_run_state(
            "models:1", group, (None,), lambda missing: run_models([r.pk for r in missing])
        )
        for run in group:
            run.cost_summary = table.summarize(sums.get(run.pk, []))


def run_cost(run: Any, agent: str | None = None) -> CostSummary:
    """The run's cost (of one pool agent's steps, when given), by model: the project's prices (read
    every time) over its steps' tokens per model (one grouped query, none while the run has not changed
    since: `traces.core.runcache`)."""
    sums = by_run_state("models:1", run, (agent,), lambda: run_models([run.pk], agent).get(run.pk, []))
    return project_table(run.project_id).summarize(sums)


def step_costs(project_id: int, steps: list[Any]) -> tuple[CostSummary, list[float | None]]:
    """The cost of these steps together, and of each (None: its model has no price)."""
    table = project_table(project_id)
    rows = step_rows(steps)
    return table.summarize(rows), [table.cost(*row) for row in rows]
