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


@pytest.mark.django_db(transaction=True)
def test_it_reports_a_real_worker_on_healthz(celery_worker_process: subprocess.Popen[bytes]) -> None:
    import time

    from django.test import Client

    # The worker's heartbeat thread writes its row once it is ready; give it a moment on a busy machine.
    deadline = time.monotonic() + 20
    while True:
        queues = Client().get("/healthz").json()["workers"]["queues"]
        if queues.get("ingest") or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert queues["ingest"]["count"] >= 1 and queues["agents"]["count"] >= 1
    assert any(name.startswith("test-") for name in queues["ingest"]["names"])


def test_it_routes_only_tasks_that_exist() -> None:
    import traces.tasks  # noqa: F401  (registers the tasks)

    routed = set(app.conf.task_routes)
    assert routed and routed <= set(app.tasks), routed - set(app.tasks)
