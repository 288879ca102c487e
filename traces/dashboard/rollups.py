"""The dashboard's per-day rollups (DESIGN.md §10): kept per project and day, so that a dashboard view
reads at most a few hundred small rows and never scans events, nor the runs of its range.

- **Marking.** Ingestion (`traces.ingest.projecting.project_runs`) and deletion
  (`traces.ingest.deletion.do_delete_run`) call `mark_runs` / `mark_days` inside their transaction: one
  upsert of `RollupDay(project, day)` per batch, `marked_at` moved to now.
- **Refreshing.** `refresh_day` recomputes a day from its runs' rows (`Run`, `Step` grouped per run,
  agent and model, `ContextDecision` counts) — never the raw events — and replaces its rollup rows;
  the mark is cleared only if nobody marked the day again meanwhile. The `refresh_rollups` beat task
  (`traces.tasks`, every `ARCANA_ROLLUP_SECONDS`) refreshes marked days; the dashboard refreshes the
  marked days of its project itself when they are small (`refresh_project`), so a small project is
  never stale.
- A day is the UTC day a run **started**: a run counts, with all its steps and cost, on that day.
- A price change marks every day of the project (`mark_project`): the cost is priced at refresh.
- Beside a day's rows, the same refresh keeps **one row per run** (`RunRollup`, per agent as the
  day's): what a dashboard filtered by score sums, for the matching runs only; and recomputes the
  **sessions** those runs belong to (`SessionRollup`, summed from their runs' rows), which the
  Sessions list reads.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import Count, Max, Min, Q, Sum
from django.db.models.functions import TruncDate
from django.utils import timezone

from runtime.pricing import PriceTable
from traces.core import prepared
from traces.dashboard import histograms
from traces.dashboard.prices import project_table
from traces.dashboard.sessions import BUNDLE, RUN
from traces.models import (
    ALL_AGENTS,
    ContextDecision,
    DailyRollup,
    RollupDay,
    Run,
    RunRollup,
    SessionRollup,
    Step,
)

#: The dashboard refreshes its project's marked days itself while they hold at most this many runs.
INLINE_RUNS = 3000


def day_of(instant: dt.datetime | None) -> dt.date | None:
    return None if instant is None else instant.astimezone(dt.UTC).date()


def day_bounds(day: dt.date) -> tuple[dt.datetime, dt.datetime]:
    start = dt.datetime.combine(day, dt.time.min, tzinfo=dt.UTC)
    return start, start + dt.timedelta(days=1)


def mark_days(project_id: int, days: Iterable[dt.date | None]) -> None:
    """Mark these days of the project for a new rollup (one statement, the days in order).

    PostgreSQL: our own prepared upsert of the days as one array, not `bulk_create` (Django built a
    model instance per day and compiled the statement each time: ~0.5 ms of CPU per ingested batch).
    Ingestion marks last in its transaction, just before the commit: the marked rows stay locked
    until then, and a concurrent batch marking one of those days waits for it (marked with the runs'
    counters, earlier in the batch, it waited through the batch's COPYs: lock waits seen in
    pg_stat_activity during mix (b) of bench/ingest.py, none this way)."""
    wanted = sorted({d for d in days if d})
    if not wanted:
        return
    now = timezone.now()
    if connection.vendor == "postgresql":
        table = connection.ops.quote_name(RollupDay._meta.db_table)
        with prepared.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {table} (project_id, day, marked_at) SELECT %s, d, %s FROM unnest(%s::date[]) AS d "
                "ON CONFLICT (project_id, day) DO UPDATE SET marked_at = EXCLUDED.marked_at",
                [project_id, now, wanted],
            )  # noqa: S608  (the table's name is ours; values are parameters)
        return
    RollupDay.objects.bulk_create(
        [RollupDay(project_id=project_id, day=d, marked_at=now) for d in wanted],
        update_conflicts=True,
        unique_fields=["project", "day"],
        update_fields=["marked_at"],
    )


def mark_runs(
    project_id: int, runs: Iterable[Run], before: dict[int, dt.datetime | None] | None = None
) -> None:
    """Mark the start days of `runs` (and, from `before`, the day each started on before, when a
    batch moved its start)."""
    days = {day_of(r.started_at) for r in runs}
    days |= {day_of(v) for v in (before or {}).values()}
    mark_days(project_id, days)


def mark_project(project_id: int) -> None:
    """Mark every day of the project that has runs or rollups (a price change)."""
    days = set(
        Run.objects.filter(project_id=project_id, started_at__isnull=False)
        .annotate(d=TruncDate("started_at", tzinfo=dt.UTC))
        .values_list("d", flat=True)
        .distinct()
    )
    days |= set(DailyRollup.objects.filter(project_id=project_id).values_list("day", flat=True).distinct())
    mark_days(project_id, days)


@dataclass
class _Acc:
    """One rollup row being summed."""

    runs: int = 0
    failed: int = 0
    running: int = 0
    run_ms: dict[str, int] = field(default_factory=dict)
    step_ms: dict[str, int] = field(default_factory=dict)
    steps: int = 0
    prompt: int = 0
    completion: int = 0
    cached: int = 0
    cost: float = 0.0
    unpriced: int = 0
    by_model: dict[str, list[Any]] = field(default_factory=dict)
    compactions: int = 0
    compacted: set[int] = field(default_factory=set)
    lost: int = 0
    lost_runs: set[int] = field(default_factory=set)
    pins: int = 0
    recalls: int = 0
    pinned: int = 0
    recalled: int = 0

    def add_steps(self, model: str, n: int, p: int, c: int, k: int, cost: float | None) -> None:
        self.steps += n
        self.prompt, self.completion, self.cached = self.prompt + p, self.completion + c, self.cached + k
        entry = self.by_model.setdefault(model, [0, 0, 0, 0, None])
        entry[0], entry[1], entry[2], entry[3] = entry[0] + n, entry[1] + p, entry[2] + c, entry[3] + k
        if cost is None:
            self.unpriced += p + c
        else:
            self.cost += cost
            entry[4] = (entry[4] or 0.0) + cost


@dataclass
class _RunInfo:
    source: str
    model: str
    agents: list[str]
    session: str
    started: dt.datetime | None
    last: dt.datetime | None
    turns: int
    tokens: int


def compute_day(project_id: int, day: dt.date, table: PriceTable | None = None) -> list[DailyRollup]:
    """The rollup rows of one (project, day) (`compute_rows`' first half)."""
    return compute_rows(project_id, day, table)[0]


def compute_rows(
    project_id: int, day: dt.date, table: PriceTable | None = None
) -> tuple[list[DailyRollup], list[RunRollup]]:
    """The rollup rows of one (project, day) and its runs' own rows, from the rows of the runs that
    started that day. Long because it reads four grouped queries into one set of rows; each step is
    a few lines."""
    table = table or project_table(project_id)
    start, end = day_bounds(day)
    runs = Run.objects.filter(project_id=project_id, started_at__gte=start, started_at__lt=end)
    info: dict[int, _RunInfo] = {}
    accs: dict[tuple[str, str, str], _Acc] = {}
    per_run: dict[tuple[int, str], _Acc] = {}

    def keys(pk: int, agent: str | None = None) -> list[_Acc]:
        i = info[pk]
        names = [ALL_AGENTS] + (list(i.agents) if agent is None else [agent] if agent in i.agents else [])
        return [accs.setdefault((i.source, i.model, name), _Acc()) for name in names] + [
            per_run.setdefault((pk, name), _Acc()) for name in names
        ]

    for pk, source, model, status, started, ended, agents, pins, recalls, run_id, bundle, turns, tokens in (
        runs.values_list(
            "pk", "source", "model", "status", "started_at", "ended_at", "agents", "pin_count", "recall_count",
            "run_id", "bundle_id", "turns", "tokens",
        )
    ):  # fmt: skip
        session = f"{BUNDLE}{bundle}" if bundle else f"{RUN}{run_id}"
        names = [a for a in (agents or []) if isinstance(a, str) and a]
        info[pk] = _RunInfo(source, model or "", names, session, started, ended or started, turns, tokens)
        for acc in keys(pk):
            acc.runs += 1
            acc.failed += status == Run.Status.FAILED
            acc.running += status == Run.Status.RUNNING
            if status != Run.Status.RUNNING and started and ended:
                histograms.add(acc.run_ms, max((ended - started).total_seconds() * 1000, 0))
            acc.pins += pins
            acc.recalls += recalls
            acc.pinned += pins > 0
            acc.recalled += recalls > 0
    if not info:
        return [], []
    in_day = Q(run__project_id=project_id, run__started_at__gte=start, run__started_at__lt=end)
    grouped = (
        Step.objects.filter(in_day)
        .values("run_id", "agent", "model")
        .annotate(n=Count("id"), p=Sum("prompt_tokens"), c=Sum("completion_tokens"), k=Sum("cached_tokens"))
        .order_by()
    )
    for row in grouped:
        if row["run_id"] not in info:
            continue
        p, c, k = row["p"] or 0, row["c"] or 0, row["k"] or 0
        cost = table.cost(row["model"], p, c, k)
        for acc in keys(row["run_id"], row["agent"]):
            acc.add_steps(row["model"] or "", row["n"], p, c, k, cost)
    latencies = Step.objects.filter(in_day, latency_ms__isnull=False).values_list(
        "run_id", "agent", "latency_ms"
    )
    for run_pk, agent, ms in latencies.order_by():
        if run_pk in info and ms is not None:
            for acc in keys(run_pk, agent):
                histograms.add(acc.step_ms, ms)
    condensed = (
        ContextDecision.objects.filter(in_day)
        .filter(Q(dropped_count__gt=0) | Q(compressed_count__gt=0))
        .values("run_id", "agent")
        .annotate(n=Count("id"))
        .order_by()
    )
    for row in condensed:
        if row["run_id"] in info:
            for acc in keys(row["run_id"], row["agent"]):
                acc.compactions += row["n"]
                acc.compacted.add(row["run_id"])
    lost = ContextDecision.objects.filter(in_day, report__has_key="lost_instructions").values_list(
        "run_id", "agent", "report__lost_instructions"
    )
    for run_pk, agent, items in lost.order_by():
        n = len(items) if isinstance(items, list) else 0
        if run_pk in info and n:
            for acc in keys(run_pk, agent):
                acc.lost += n
                acc.lost_runs.add(run_pk)
    now = timezone.now()
    daily = [
        DailyRollup(
            project_id=project_id,
            day=day,
            source=source,
            model=model,
            agent=agent,
            runs=a.runs,
            failed=a.failed,
            running=a.running,
            run_ms=a.run_ms,
            step_ms=a.step_ms,
            steps=a.steps,
            prompt_tokens=a.prompt,
            completion_tokens=a.completion,
            cached_tokens=a.cached,
            cost_usd=a.cost,
            unpriced_tokens=a.unpriced,
            by_model=a.by_model,
            compactions=a.compactions,
            runs_compacted=len(a.compacted),
            lost_instructions=a.lost,
            runs_lost=len(a.lost_runs),
            pins=a.pins,
            recalls=a.recalls,
            runs_pinned=a.pinned,
            runs_recalled=a.recalled,
            computed_at=now,
        )
        for (source, model, agent), a in sorted(accs.items())
    ]
    return daily, [_run_row(project_id, day, pk, agent, info[pk], a) for (pk, agent), a in per_run.items()]


def _run_row(project_id: int, day: dt.date, pk: int, agent: str, i: _RunInfo, a: _Acc) -> RunRollup:
    return RunRollup(
        project_id=project_id, run_id=pk, day=day, source=i.source, model=i.model, agent=agent,
        session=i.session, started_at=i.started, last_at=i.last, failed=a.failed, running=a.running,
        run_bucket=int(next(iter(a.run_ms))) if a.run_ms else None, step_ms=a.step_ms,
        turns=i.turns if agent == ALL_AGENTS else 0, tokens=i.tokens if agent == ALL_AGENTS else 0,
        steps=a.steps, prompt_tokens=a.prompt, completion_tokens=a.completion, cached_tokens=a.cached,
        cost_usd=a.cost, unpriced_tokens=a.unpriced, by_model=a.by_model, compactions=a.compactions,
        lost_instructions=a.lost, pins=a.pins, recalls=a.recalls,
    )  # fmt: skip


def refresh_sessions(project_id: int, keys: Iterable[str]) -> None:
    """Sum the sessions `keys` of a project again from their runs' rows (a session left with no run
    loses its row). One grouped query per 500 sessions."""
    keys = sorted(set(keys))
    now = timezone.now()
    for i in range(0, len(keys), 500):
        chunk = keys[i : i + 500]
        sums = (
            RunRollup.objects.filter(
                project_id=project_id, agent=ALL_AGENTS, session__in=chunk, run__isnull=False
            )
            .values("session")
            .annotate(
                n=Count("id"), first=Min("started_at"), last=Max("last_at"), turns=Sum("turns"),
                tokens=Sum("tokens"), cost=Sum("cost_usd"), unpriced=Sum("unpriced_tokens"),
                failed=Sum("failed"), running=Sum("running"), source=Max("source"),
            )
            .order_by()
        )  # fmt: skip
        rows = [
            SessionRollup(
                project_id=project_id,
                key=r["session"],
                runs=r["n"],
                first=r["first"],
                last=r["last"],
                turns=r["turns"] or 0,
                tokens=r["tokens"] or 0,
                cost_usd=r["cost"] or 0.0,
                unpriced_tokens=r["unpriced"] or 0,
                failed=r["failed"] or 0,
                running=r["running"] or 0,
                source=r["source"] or "",
                computed_at=now,
            )  # fmt: skip
            for r in sums
        ]
        SessionRollup.objects.filter(project_id=project_id, key__in=chunk).delete()
        SessionRollup.objects.bulk_create(rows)


def refresh_day(project_id: int, day: dt.date, table: PriceTable | None = None) -> int:
    """Recompute one (project, day) and clear its mark unless it was marked again meanwhile.
    Returns the number of rollup rows written."""
    started = timezone.now()
    rows, run_rows = compute_rows(project_id, day, table)
    try:
        with transaction.atomic():
            DailyRollup.objects.filter(project_id=project_id, day=day).delete()
            DailyRollup.objects.bulk_create(rows)
            # The day's run rows, and those its runs left on another day (a run whose start moved).
            old = RunRollup.objects.filter(project_id=project_id).filter(
                Q(day=day) | Q(run_id__in=list({r.run_id for r in run_rows}))
            )
            sessions = set(old.filter(agent=ALL_AGENTS).values_list("session", flat=True))
            old.delete()
            RunRollup.objects.bulk_create(run_rows, batch_size=2000)
            refresh_sessions(project_id, sessions | {r.session for r in run_rows})
            RollupDay.objects.filter(project_id=project_id, day=day, marked_at__lte=started).delete()
    except IntegrityError:
        # Another refresh of the same day (the beat task and a dashboard view at once) wrote it
        # first: its rows are as fresh as ours; a mark made since stays for the next refresh.
        return 0
    return len(rows)


def refresh_marked(limit: int = 200) -> int:
    """Refresh up to `limit` marked days, oldest mark first (the beat task). Returns the days done."""
    marks = list(RollupDay.objects.order_by("marked_at").values_list("project_id", "day")[:limit])
    tables: dict[int, PriceTable] = {}
    for project_id, day in marks:
        table = tables.setdefault(project_id, project_table(project_id))
        refresh_day(project_id, day, table)
    return len(marks)


def marked_days(project_id: int) -> list[dt.date]:
    return list(RollupDay.objects.filter(project_id=project_id).order_by("day").values_list("day", flat=True))


def refresh_project(project_id: int, *, budget: int | None = INLINE_RUNS) -> list[dt.date]:
    """Refresh the project's marked days while their runs fit in `budget` (None: all of them), the
    dashboard's own catch-up; returns the marked days left for the beat task."""
    days = marked_days(project_id)
    if not days:
        return []
    if budget is not None:
        # One count per marked day through the (project, started_at) index.
        runs = 0
        for d in days:
            start, end = day_bounds(d)
            runs += Run.objects.filter(
                project_id=project_id, started_at__gte=start, started_at__lt=end
            ).count()
        if runs > budget:
            return days
    table = project_table(project_id)
    for d in days:
        refresh_day(project_id, d, table)
    return []


def refresh_projects(projects: Any, *, budget: int | None = INLINE_RUNS) -> list[int]:
    """`refresh_project` for each of `projects` (a queryset) with marked days — one query when none
    has any; returns the projects whose marked days were left for the beat task."""
    marked = RollupDay.objects.filter(project__in=projects).values_list("project_id", flat=True).distinct()
    return [pk for pk in sorted(set(marked)) if refresh_project(pk, budget=budget)]


def rebuild_project(project_id: int) -> int:
    """Mark and refresh every day of the project (after an import, or to repair). Returns the days."""
    mark_project(project_id)
    days = marked_days(project_id)
    table = project_table(project_id)
    for d in days:
        refresh_day(project_id, d, table)
    return len(days)
