"""Celery tasks. They take ids, re-read rows, and call `traces.ingest` or `runtime`."""

from __future__ import annotations

import logging
import time
from typing import Any

from celery import shared_task
from django.utils import timezone

from traces import ingest
from traces.models import Project, Upload

log = logging.getLogger(__name__)

#: Lines per `ingest_events` call (one transaction each) and per progress update.
UPLOAD_CHUNK_LINES = 500
#: An upload task stops after this many seconds and re-queues itself from its cursor (`lines_done`),
#: so one huge file never holds a worker for long.
UPLOAD_TIME_BUDGET_S = 300.0


@shared_task(name="traces.tasks.ping")
def ping(value: str) -> dict[str, str]:
    """A no-op round trip through the broker and a worker (health checks and tests)."""
    return {"pong": value}


@shared_task(name="traces.tasks.process_upload")
def process_upload(upload_id: int) -> dict[str, Any]:
    """Parse an upload's file in chunks through `traces.ingest`, updating progress on its row.

    Safe to run twice: the row is claimed with a conditional update (queued → running), so a second
    delivery of the same message does nothing; re-ingesting lines is harmless anyway (duplicates).
    After `UPLOAD_TIME_BUDGET_S` the task puts the row back to `queued` with its cursor (`lines_done`)
    and re-queues itself; the next run resumes after that line.
    """
    now = timezone.now()
    claimed = Upload.objects.filter(pk=upload_id, status=Upload.Status.QUEUED).update(
        status=Upload.Status.RUNNING, started_at=now
    )
    if claimed != 1:
        return {"upload": upload_id, "skipped": "not queued"}
    upload = Upload.objects.select_related("project").get(pk=upload_id)
    base: dict[str, Any] = {
        "accepted": upload.accepted,
        "duplicates": upload.duplicates,
        "rejected": upload.rejected,
        "errors": list(upload.line_errors),
        "runs": set(upload.runs),
    }
    cursor = upload.lines_done
    deadline = time.monotonic() + UPLOAD_TIME_BUDGET_S
    try:
        if upload.lines_total is None:
            with upload.file.open("rb") as raw, ingest.open_jsonl(raw) as fh:
                upload.lines_total = ingest.count_lines(fh)
            Upload.objects.filter(pk=upload_id).update(lines_total=upload.lines_total)

        def progress(last_line: int, totals: ingest.JsonlResult) -> bool:
            errors = base["errors"] + [e.to_dict() for e in totals.line_errors]
            Upload.objects.filter(pk=upload_id).update(
                lines_done=max(last_line, cursor),
                accepted=base["accepted"] + totals.accepted,
                duplicates=base["duplicates"] + totals.duplicates,
                rejected=base["rejected"] + totals.rejected,
                line_errors=errors[: ingest.MAX_LINE_ERRORS],
                runs=sorted(base["runs"] | totals.runs),
            )
            return time.monotonic() > deadline

        with upload.file.open("rb") as raw, ingest.open_jsonl(raw) as fh:
            ingest.ingest_jsonl(
                upload.project,
                fh,
                source="upload",
                chunk_lines=UPLOAD_CHUNK_LINES,
                skip_lines=cursor,
                on_chunk=progress,
            )
    except Exception as exc:
        log.exception("upload %s failed", upload_id)
        Upload.objects.filter(pk=upload_id).update(
            status=Upload.Status.FAILED,
            error=f"{type(exc).__name__}: {exc}"[:2000],
            finished_at=timezone.now(),
        )
        return {"upload": upload_id, "status": "failed"}
    upload.refresh_from_db()
    if (
        upload.lines_total is not None
        and upload.lines_done < upload.lines_total
        and time.monotonic() > deadline
    ):
        Upload.objects.filter(pk=upload_id, status=Upload.Status.RUNNING).update(status=Upload.Status.QUEUED)
        process_upload.delay(upload_id)
        return {"upload": upload_id, "status": "requeued", "lines_done": upload.lines_done}
    Upload.objects.filter(pk=upload_id).update(
        status=Upload.Status.DONE,
        lines_done=max(upload.lines_done, upload.lines_total or 0),
        finished_at=timezone.now(),
    )
    return {"upload": upload_id, "status": "done"}


@shared_task(name="traces.tasks.run_demo_conversation")
def run_demo_conversation(project_id: int) -> dict[str, Any]:
    """Run the scripted demo conversation on the `agents` queue, streaming into the project."""
    from traces.conversations import run_demo_conversation as run

    project = Project.objects.get(pk=project_id)
    return run(project)


@shared_task(name="traces.tasks.run_conversation", acks_late=True, reject_on_worker_lost=True)
def run_conversation(conversation_id: int) -> dict[str, Any]:
    """Run a conversation's pending turns (a whole script, or one playground turn) on the `agents`
    queue. Safe to deliver twice: the row is claimed with a conditional update under a lease
    (`traces.conversations.run_pending_turns`)."""
    from traces.conversations import run_pending_turns

    return run_pending_turns(conversation_id)


@shared_task(name="traces.tasks.sweep_conversations")
def sweep_conversations() -> dict[str, int]:
    """Periodic (Celery beat): re-queue conversations whose worker vanished, fail the hopeless ones."""
    from traces.conversations import sweep_conversations as sweep

    return sweep()


@shared_task(name="traces.tasks.enforce_retention")
def enforce_retention() -> dict[str, int]:
    """Periodic (Celery beat): delete runs older than their project's `retention_days`, audited per
    project (`traces.teams.do_enforce_retention`). Safe to run twice: a deleted run is not found again."""
    from traces.teams import do_enforce_retention

    return {"deleted": do_enforce_retention()}
