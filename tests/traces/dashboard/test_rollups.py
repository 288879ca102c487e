"""The dashboard's per-day rollups: ingestion marks the days it touches, a refresh recomputes them from
the run rows, and their sums equal what the runs hold (whatever the order of marking and refreshing)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.db.models import Sum

from traces import ingest
from traces.dashboard import histograms, rollups
from traces.models import ALL_AGENTS, DailyRollup, ModelPrice, Project, RollupDay, Run, Step

from ..helpers import our_run
from ..views_helpers import OUR_RUN, POOL_RUN, ingest_samples


def _sum(project: Project, field: str, agent: str = ALL_AGENTS) -> Any:
    return DailyRollup.objects.filter(project=project, agent=agent).aggregate(s=Sum(field))["s"] or 0


def test_ingest_marks_days_and_a_refresh_adds_up_to_the_runs(project: Project) -> None:
    ingest_samples(project)
    runs = Run.objects.filter(project=project, started_at__isnull=False)
    days = {rollups.day_of(r.started_at) for r in runs}
    assert set(rollups.marked_days(project.pk)) == days
    assert rollups.refresh_marked() == len(days)
    assert not RollupDay.objects.exists()
    assert _sum(project, "runs") == runs.count()
    assert _sum(project, "failed") == runs.filter(status="failed").count()
    steps = Step.objects.filter(run__project=project)
    assert _sum(project, "steps") == steps.count()
    assert _sum(project, "prompt_tokens") == steps.aggregate(s=Sum("prompt_tokens"))["s"]
    assert _sum(project, "pins") == runs.aggregate(s=Sum("pin_count"))["s"]
    assert _sum(project, "runs_pinned") == runs.filter(pin_count__gt=0).count()
    # Only our runs use a priced model (gpt-4o-mini); Arcana's mock-gpt tokens are counted unpriced.
    ours = Step.objects.filter(run__project=project, model="gpt-4o-mini").aggregate(
        p=Sum("prompt_tokens"), c=Sum("completion_tokens")
    )
    assert _sum(project, "cost_usd") == pytest.approx((ours["p"] * 0.15 + ours["c"] * 0.60) / 1e6)
    other = steps.exclude(model="gpt-4o-mini").aggregate(p=Sum("prompt_tokens"), c=Sum("completion_tokens"))
    assert _sum(project, "unpriced_tokens") == other["p"] + other["c"] > 0
    # A pool's agents have rows of their own: each counts the run once and only its own steps.
    pool = Run.objects.get(project=project, run_id=POOL_RUN)
    for agent in pool.agents:
        assert _sum(project, "runs", agent) == 1
        assert _sum(project, "steps", agent) == Step.objects.filter(run=pool, agent=agent).count()
    latencies = list(steps.exclude(latency_ms=None).values_list("latency_ms", flat=True))
    merged = histograms.merge(
        DailyRollup.objects.filter(project=project, agent=ALL_AGENTS).values_list("step_ms", flat=True)
    )
    assert histograms.count(merged) == len(latencies)


def test_a_price_change_and_a_deleted_run_mark_their_days(project: Project) -> None:
    ingest_samples(project)
    rollups.refresh_marked()
    run = Run.objects.get(project=project, run_id=OUR_RUN)
    steps = Step.objects.filter(run__project=project)
    for model in set(steps.exclude(model="").values_list("model", flat=True)):
        ModelPrice.objects.create(project=project, model=model, input_per_million=1, output_per_million=2)
    rollups.mark_project(project.pk)
    rollups.refresh_marked()
    # Every named model is priced now; a step that names no model stays unpriced (never guessed).
    nameless = steps.filter(model="").aggregate(p=Sum("prompt_tokens"), c=Sum("completion_tokens"))
    assert _sum(project, "unpriced_tokens") == (nameless["p"] or 0) + (nameless["c"] or 0)
    before = _sum(project, "runs")
    ingest.do_delete_run(run)
    assert rollups.marked_days(project.pk) == [rollups.day_of(run.started_at)]
    assert rollups.refresh_project(project.pk) == []
    assert _sum(project, "runs") == before - 1


def test_a_mark_made_during_a_refresh_survives_it(project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    ingest_samples(project)
    day = rollups.marked_days(project.pk)[0]
    real = rollups.compute_rows

    def slow(project_id: int, d: dt.date, table: Any = None) -> Any:
        rows = real(project_id, d, table)
        rollups.mark_days(project_id, [d])  # a batch arrives while the day is computed
        return rows

    monkeypatch.setattr(rollups, "compute_rows", slow)
    rollups.refresh_day(project.pk, day)
    assert day in rollups.marked_days(project.pk)


def test_histogram_percentiles_merge() -> None:
    a = histograms.add(histograms.add({}, 100), 100)
    b = histograms.add({}, 10_000)
    merged = histograms.merge([a, b])
    assert histograms.percentile(merged, 0.5) == pytest.approx(histograms.upper(histograms.bucket(100)))
    assert histograms.percentile(merged, 0.95) == pytest.approx(histograms.upper(histograms.bucket(10_000)))
    assert 100 <= histograms.upper(histograms.bucket(100)) < 100 * 1.13
    assert histograms.percentile({}, 0.5) is None


def test_the_beat_task_refreshes_marked_days(project: Project) -> None:
    from django.conf import settings

    from traces import tasks

    assert settings.CELERY_BEAT_SCHEDULE["refresh-rollups"]["task"] == "traces.tasks.refresh_rollups"
    ingest_samples(project)
    days = len(rollups.marked_days(project.pk))
    assert tasks.refresh_rollups() == {"days": days}
    assert not RollupDay.objects.exists() and DailyRollup.objects.filter(project=project).exists()


@pytest.mark.django_db(transaction=True)
def test_the_migration_marks_the_days_of_the_runs_stored_before_it(project: Project) -> None:
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    ingest_samples(project)
    days = {
        rollups.day_of(r.started_at) for r in Run.objects.filter(project=project, started_at__isnull=False)
    }
    executor = MigrationExecutor(connection)
    executor.migrate([("traces", "0020_otlp_spans")])
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())
    assert set(rollups.marked_days(project.pk)) == days
    assert rollups.refresh_project(project.pk) == []
    assert (
        DailyRollup.objects.filter(project=project, agent=ALL_AGENTS).aggregate(s=Sum("runs"))["s"]
        == Run.objects.filter(project=project, started_at__isnull=False).count()
    )


def test_a_rebuild_marks_the_project(project: Project) -> None:
    ingest_samples(project)
    rollups.refresh_marked()
    ingest.do_rebuild_projections(project=project)
    assert set(rollups.marked_days(project.pk)) == set(
        DailyRollup.objects.filter(project=project).values_list("day", flat=True)
    )


def test_two_refreshes_of_one_day_at_once_leave_one_set_of_rows(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    ingest_samples(project)
    day = rollups.marked_days(project.pk)[0]
    real = DailyRollup.objects.bulk_create
    other = rollups.compute_day(project.pk, day)

    def after_the_other_refresh(rows: Any, *args: Any, **kwargs: Any) -> Any:
        real(other)  # another refresh wrote the day between our delete and our insert
        return real(rows, *args, **kwargs)

    monkeypatch.setattr(DailyRollup.objects, "bulk_create", after_the_other_refresh)
    assert rollups.refresh_day(project.pk, day) == 0  # ours gave way, no error
    monkeypatch.undo()
    assert DailyRollup.objects.filter(project=project, day=day).count() == 0  # rolled back, both
    assert day in rollups.marked_days(project.pk)  # so the mark stays for the next refresh
    assert rollups.refresh_day(project.pk, day) == len(other)


def test_a_batch_that_moves_a_runs_start_marks_the_day_before_and_after(project: Project) -> None:
    """A late event earlier than the run's start moves the run to another day: both days are marked
    (on PostgreSQL by the statement that writes the run's counters), and the refresh moves its row."""
    events = our_run("moved", turns=2, steps=1)
    events[0]["timestamp"] = "2026-11-28T23:00:00+00:00"
    assert ingest.ingest_events(project, events[1:], source="api").accepted == len(events) - 1
    assert rollups.marked_days(project.pk) == [dt.date(2026, 11, 30)]
    rollups.refresh_marked()
    assert ingest.ingest_events(project, events[:1], source="api").accepted == 1
    assert rollups.marked_days(project.pk) == [dt.date(2026, 11, 28), dt.date(2026, 11, 30)]
    rollups.refresh_marked()
    assert list(DailyRollup.objects.filter(project=project, agent=ALL_AGENTS).values_list("day", "runs")) == [
        (dt.date(2026, 11, 28), 1)
    ]
