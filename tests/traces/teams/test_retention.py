"""Retention runs under Celery beat: the schedule names the task, a real worker process runs it, and
the operator's command does the same — each deletion audited."""

from __future__ import annotations

import subprocess
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.conf import settings
from django.core.management import call_command
from django.utils import timezone

from arcana_site.celery import app
from tests.traces.views_helpers import OUR_RUN, OURS, ingest_file
from traces.models import AuditLog, Event, Project, Run


def _expire(project: Project, days: int) -> None:
    ingest_file(project, OURS / f"{OUR_RUN}.jsonl")
    Project.objects.filter(pk=project.pk).update(retention_days=days)
    Run.objects.filter(project=project).update(updated_at=timezone.now() - timedelta(days=days, hours=1))


def test_the_beat_schedule_runs_retention() -> None:
    entry = settings.CELERY_BEAT_SCHEDULE["enforce-retention"]
    assert entry["task"] == "traces.tasks.enforce_retention"
    assert entry["schedule"] == float(settings.ARCANA_RETENTION_SWEEP_SECONDS)
    import traces.tasks  # noqa: F401  (registers the tasks)

    assert entry["task"] in app.tasks


@pytest.mark.django_db(transaction=True)
def test_a_real_worker_enforces_retention(
    celery_worker_process: subprocess.Popen[bytes], project: Project, alice: Any
) -> None:
    _expire(project, 3)
    result = app.send_task("traces.tasks.enforce_retention", queue="ingest")
    assert result.get(timeout=60) == {"deleted": 1}
    assert not Run.objects.filter(project=project).exists()
    assert not Event.objects.filter(project=project).exists()
    row = AuditLog.objects.get(event_type=AuditLog.RUNS_EXPIRED)
    assert row.actor_label == "retention" and row.extra["run_ids"] == [OUR_RUN]
    # Twice is harmless: nothing is left to delete.
    assert app.send_task("traces.tasks.enforce_retention", queue="ingest").get(timeout=60) == {"deleted": 0}


def test_the_command_enforces_retention(project: Project, alice: Any) -> None:
    _expire(project, 10)
    out = StringIO()
    call_command("enforce_retention", stdout=out)
    assert out.getvalue().strip() == "Deleted 1 run past retention."
    assert not Run.objects.filter(project=project).exists()
