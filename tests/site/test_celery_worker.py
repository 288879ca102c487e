"""A real Celery worker process on the configured broker runs our tasks."""

from __future__ import annotations

import subprocess
import uuid

import pytest

from arcana_site.celery import app


@pytest.mark.django_db(transaction=True)
def test_it_runs_a_task_in_a_real_worker(celery_worker_process: subprocess.Popen[bytes]) -> None:
    token = uuid.uuid4().hex
    result = app.send_task("traces.tasks.ping", args=[token], queue="ingest")
    assert result.get(timeout=30) == {"pong": token}
    assert celery_worker_process.poll() is None  # the worker is a separate, still-running process


def test_it_never_runs_tasks_eagerly() -> None:
    assert app.conf.task_always_eager is False
