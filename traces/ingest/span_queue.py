"""Spans left to a worker (`traces.ingest.spans`, stage 2): the `derive_spans` task is sent by name
(no import of `traces.tasks`), once per request that deferred; it derives every pending span of
the project (`spans.do_derive_pending`), so the tasks of a burst after the first find little left.
A message the broker lost, or a request whose derivation failed, is picked up by `sweep_spans`
(Celery beat): every project with a span pending for longer than `ARCANA_OTLP_SWEEP_AFTER_SECONDS`
gets a task again.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from celery import current_app
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from traces.models import Span

log = logging.getLogger(__name__)

TASK = "traces.tasks.derive_spans"


def enqueue_derivation(project_id: int) -> None:
    """Send the project's `derive_spans` task once the current transaction commits (at once outside
    one). When the broker cannot be reached (logged), the spans stay pending and the sweeper sends the
    task later."""

    def send() -> None:
        try:
            current_app.send_task(
                TASK, (project_id,), queue=str(settings.ARCANA_INGEST_QUEUE), ignore_result=True
            )
        except Exception as exc:  # kombu.exceptions.OperationalError, socket errors: the broker is down
            log.warning("project %s: spans stay pending, the broker is unreachable (%s)", project_id, exc)

    transaction.on_commit(send)


def sweep_spans() -> dict[str, int]:
    """Send `derive_spans` again for every project with a span pending for longer than
    `ARCANA_OTLP_SWEEP_AFTER_SECONDS` (its message was lost, or its derivation failed)."""
    before = timezone.now() - timedelta(seconds=int(settings.ARCANA_OTLP_SWEEP_AFTER_SECONDS))
    projects = list(
        Span.objects.filter(run_id="", received_at__lt=before)
        .values_list("project_id", flat=True)
        .order_by("project_id")
        .distinct()
    )
    for project_id in projects:
        enqueue_derivation(project_id)
    return {"projects": len(projects)}
