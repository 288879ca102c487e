"""Processing uploads on the workers, so that a dead worker or a dead broker loses nothing.

The interface:

* `enqueue_upload(upload_id) -> bool` — publish the task for a `queued` upload (after the row is
  committed). Fails fast when the broker is down (short connect timeouts, one retry): the row stays
  `queued` with its `queued_at`, and the sweeper sends it again once the broker is back. Never raises.
* `process_upload(upload_id) -> dict` — the body of the `process_upload` task: claim the row under a
  lease, ingest the file chunk by chunk from its cursor, finish it.
* `sweep_uploads() -> dict` — the periodic sweeper (Celery beat): re-queue `running` uploads whose
  lease expired (their worker died), re-send `queued` ones whose message was lost (broker down when
  they were accepted), fail uploads that lost their worker `ARCANA_UPLOAD_MAX_ATTEMPTS` times.

Why the counters stay exact: each chunk's events and the row's cursor and counters are committed in ONE
transaction, under the lease (the row is locked and must still be ours). A worker killed mid-chunk
leaves neither; the next owner starts at the committed cursor and ingests that chunk as if for the first
time. A worker that stalled past its lease finds the row no longer its own at its next commit and rolls
its chunk back. So every line is counted exactly once, and ingestion's idempotency by
(project, run_id, step_id) is only the second line of defence.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from datetime import timedelta
from typing import Any

from celery import current_app
from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.db.models.functions import Coalesce, Greatest
from django.utils import timezone

from runtime.errors import error_detail
from traces import ingest
from traces.models import Upload

log = logging.getLogger(__name__)

#: Lines per chunk: one transaction (events + the row's cursor and counters) and one lease renewal each.
UPLOAD_CHUNK_LINES = 500
#: A task stops after this many seconds and re-queues itself from its cursor (`lines_done`), so one huge
#: file never holds a worker for long (the task's soft time limit is above it).
UPLOAD_TIME_BUDGET_S = 300.0


class LeaseLost(Exception):
    """The row is no longer ours (the sweeper gave it to another worker after we stalled)."""


def ingest_queue() -> str:
    """The queue upload tasks go to (workers: `-Q ingest,agents`); another name isolates a fleet."""
    return str(settings.ARCANA_INGEST_QUEUE)


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"


# --------------------------------------------------------------------------------------------------
# Publishing


def enqueue_upload(upload_id: int) -> bool:
    """Send the task of a `queued` upload. False (logged) when the broker cannot be reached: the row
    keeps `queued` and its `queued_at`, and `sweep_uploads` sends it again later."""
    Upload.objects.filter(pk=upload_id, status=Upload.Status.QUEUED).update(queued_at=timezone.now())
    try:
        # By the task's name (traces/tasks.py imports this module): no import circle.
        current_app.send_task(
            "traces.tasks.process_upload", (upload_id,), queue=ingest_queue(), ignore_result=True
        )
    except Exception as exc:  # kombu.exceptions.OperationalError, socket errors: the broker is down
        log.warning("upload %s stays queued: the broker is unreachable (%s)", upload_id, exc)
        return False
    return True


# --------------------------------------------------------------------------------------------------
# The worker side


def claim(upload_id: int, owner: str) -> bool:
    """Take an upload: `queued`, or `running` under an expired lease (its worker vanished). A conditional
    update, so two deliveries of one task never both run."""
    now = timezone.now()
    claimable = Q(status=Upload.Status.QUEUED) | Q(status=Upload.Status.RUNNING, lease_expires_at__lt=now)
    return (
        Upload.objects.filter(claimable, pk=upload_id).update(
            status=Upload.Status.RUNNING,
            lease_owner=owner,
            lease_expires_at=now + _lease(),
            attempts=F("attempts") + 1,
        )
        == 1
    )


def _lease() -> timedelta:
    return timedelta(seconds=int(settings.ARCANA_UPLOAD_LEASE_SECONDS))


def _locked_own_row(upload_id: int, owner: str) -> Upload:
    """The row, locked for this transaction, if we still hold its lease; LeaseLost otherwise."""
    row = Upload.objects.select_for_update().filter(pk=upload_id).first()
    if row is None or row.status != Upload.Status.RUNNING or row.lease_owner != owner:
        raise LeaseLost(upload_id)
    return row


def process_upload(upload_id: int, *, time_budget: float = UPLOAD_TIME_BUDGET_S) -> dict[str, Any]:
    """Ingest an upload's file from its cursor, one committed chunk at a time, then mark it done.

    Returns what happened: `skipped` (someone else holds it, or it is finished), `requeued` (the time
    budget ran out; a new task continues from the cursor), `done`, `failed`, or `lost` (the lease was
    taken over while we stalled; the new owner continues)."""
    owner = worker_name()
    if not claim(upload_id, owner):
        row = Upload.objects.filter(pk=upload_id).values("status", "lease_owner").first()
        return {"upload": upload_id, "skipped": row["status"] if row else "missing"}
    Upload.objects.filter(pk=upload_id, started_at__isnull=True).update(started_at=timezone.now())
    upload = Upload.objects.select_related("project").get(pk=upload_id)
    deadline = time.monotonic() + time_budget
    try:
        if upload.lines_total is None:
            with upload.file.open("rb") as raw, ingest.open_jsonl(raw) as fh:
                total = ingest.count_lines(fh)
            with transaction.atomic():
                _locked_own_row(upload_id, owner)
                Upload.objects.filter(pk=upload_id).update(
                    lines_total=total, lease_expires_at=timezone.now() + _lease()
                )
        finished = _ingest_from_cursor(upload, owner, deadline)
    except LeaseLost:
        log.warning("upload %s: lease lost to another worker; it continues from the cursor", upload_id)
        return {"upload": upload_id, "status": "lost"}
    except SoftTimeLimitExceeded:
        # The task's soft time limit (a chunk that hung): the chunk in flight was rolled back; hand the
        # row back from its cursor like a spent time budget.
        log.warning("upload %s hit the task's soft time limit; re-queued from its cursor", upload_id)
        finished = False
    except Exception as exc:
        if _is_outage(exc):
            # The database or storage is away: not the file's fault. Keep the row `running`; its lease
            # runs out and the sweeper hands it to a worker once things are back.
            log.warning("upload %s paused by an outage (%s); the sweeper resumes it", upload_id, exc)
            raise
        log.exception("upload %s failed", upload_id)
        Upload.objects.filter(pk=upload_id, lease_owner=owner).update(
            status=Upload.Status.FAILED,
            error=f"{type(exc).__name__}: {exc}"[:2000],
            finished_at=timezone.now(),
            lease_owner="",
            lease_expires_at=None,
        )
        return {"upload": upload_id, "status": "failed"}
    if not finished:
        # Out of time: hand the row back as `queued` with its cursor, and send a new task for it.
        if Upload.objects.filter(pk=upload_id, lease_owner=owner).update(
            status=Upload.Status.QUEUED, lease_owner="", lease_expires_at=None, attempts=0
        ):
            enqueue_upload(upload_id)
        done = Upload.objects.filter(pk=upload_id).values_list("lines_done", flat=True).first()
        return {"upload": upload_id, "status": "requeued", "lines_done": done}
    # The count read before ingesting and the lines ingested agree, whichever is larger (a file that
    # could not be read to its end is counted up to the line where reading stopped).
    whole = Greatest(Coalesce(F("lines_total"), 0), F("lines_done"))
    Upload.objects.filter(pk=upload_id, lease_owner=owner).update(
        status=Upload.Status.DONE,
        lines_total=whole,
        lines_done=whole,
        finished_at=timezone.now(),
        lease_owner="",
        lease_expires_at=None,
    )
    return {"upload": upload_id, "status": "done"}


def _ingest_from_cursor(upload: Upload, owner: str, deadline: float) -> bool:
    """Ingest the file after line `upload.lines_done`, a chunk per transaction. True when the file is
    finished, False when the time budget ran out first."""
    cursor = upload.lines_done
    with upload.file.open("rb") as raw, ingest.open_jsonl(raw) as fh:
        first = True
        while True:
            if time.monotonic() > deadline:
                return False
            with transaction.atomic():
                # One chunk: `ingest_jsonl` stops after its first chunk (on_chunk returns True) and
                # leaves `fh` just after the chunk's last line, so the next call reads on from there.
                # Its line numbers restart at 1 on each call: `base` makes them the file's.
                base = 0 if first else cursor
                result = ingest.ingest_jsonl(
                    upload.project,
                    fh,
                    source="upload",
                    chunk_lines=UPLOAD_CHUNK_LINES,
                    skip_lines=cursor if first else 0,
                    on_chunk=lambda _last, _totals: True,
                )
                end = base + result.lines
                _commit_chunk(upload.pk, owner, result, base, end)
            # Fewer lines than a chunk: the stream ended (or could not be read further).
            read = result.lines - (cursor if first else 0)
            first = False
            cursor = max(cursor, end)
            if read < UPLOAD_CHUNK_LINES or result.lines == 0:
                return True


def _commit_chunk(upload_id: int, owner: str, result: ingest.JsonlResult, base: int, end: int) -> None:
    """Add one chunk's totals to the row, move its cursor and renew the lease — in the transaction that
    stored the chunk's events, and only if the row is still ours (else LeaseLost rolls them back)."""
    row = _locked_own_row(upload_id, owner)
    errors = list(row.line_errors)
    room = ingest.MAX_LINE_ERRORS - len(errors)
    errors += [error_detail(e.error, line=base + e.line, field=e.field) for e in result.line_errors[:room]]
    Upload.objects.filter(pk=upload_id).update(
        lines_done=max(row.lines_done, end),
        accepted=row.accepted + result.accepted,
        duplicates=row.duplicates + result.duplicates,
        rejected=row.rejected + result.rejected,
        line_errors=errors,
        runs=sorted(set(row.runs) | result.runs),
        lease_expires_at=timezone.now() + _lease(),
    )


def _is_outage(exc: BaseException) -> bool:
    """A database that went away, or storage that cannot be read: the work is retried, not failed."""
    from django.db import InterfaceError, OperationalError

    return isinstance(exc, InterfaceError | OperationalError | ConnectionError)


# --------------------------------------------------------------------------------------------------
# The sweeper


def sweep_uploads() -> dict[str, int]:
    """Find uploads whose worker vanished or whose message was lost, and queue them again.

    A `running` row whose lease expired lost its worker (killed, machine gone): back to `queued` and a
    new task, which resumes at the cursor; after `ARCANA_UPLOAD_MAX_ATTEMPTS` lost workers it fails (a
    file that kills whoever reads it must not loop forever). A `queued` row whose task was sent more than
    `ARCANA_UPLOAD_RESEND_SECONDS` ago, or never (the broker was down), is sent again (harmless if the
    first message is still coming: the claim lets one task run)."""
    now = timezone.now()
    max_attempts = int(settings.ARCANA_UPLOAD_MAX_ATTEMPTS)
    requeued = failed = resent = 0
    expired = Upload.objects.filter(status=Upload.Status.RUNNING, lease_expires_at__lt=now)
    for pk, attempts in expired.values_list("pk", "attempts"):
        still = Upload.objects.filter(pk=pk, status=Upload.Status.RUNNING, lease_expires_at__lt=now)
        if attempts >= max_attempts:
            failed += still.update(
                status=Upload.Status.FAILED,
                error=f"the worker processing this upload was lost {attempts} times; giving up",
                lease_owner="",
                lease_expires_at=None,
                finished_at=now,
            )
            continue
        if still.update(status=Upload.Status.QUEUED, lease_owner="", lease_expires_at=None):
            requeued += 1
            enqueue_upload(pk)
    stale = now - timedelta(seconds=int(settings.ARCANA_UPLOAD_RESEND_SECONDS))
    lost = Upload.objects.filter(status=Upload.Status.QUEUED).filter(
        Q(queued_at__lt=stale) | Q(queued_at__isnull=True, created_at__lt=stale)
    )
    for pk in lost.values_list("pk", flat=True):
        enqueue_upload(pk)
        resent += 1
    return {"requeued": requeued, "failed": failed, "resent": resent}


# --------------------------------------------------------------------------------------------------
# File names

#: The extensions an upload may have (checked after cleaning).
UPLOAD_SUFFIXES = (".jsonl.gz", ".jsonl", ".ndjson")
_NAME_MAX = 120


def clean_file_name(name: str | None, default: str = "upload.jsonl") -> str:
    """An upload's file name made storable: the last path component only (no `../`, no folders), no
    NUL or other control characters, lone surrogates replaced, no leading dots, at most 120 characters
    with its extension kept. A name with nothing left becomes `default`.

    >>> clean_file_name("../../etc/passwd.jsonl")
    'passwd.jsonl'
    >>> clean_file_name("a\\x00b.jsonl")
    'ab.jsonl'
    """
    text = str(name or "")
    # Lone surrogates (undecodable bytes in a multipart header) cannot be stored: "?" instead.
    text = text.encode("utf-8", "replace").decode("utf-8")
    text = "".join(ch for ch in text if ch.isprintable() or ch == " ")
    text = text.replace("\\", "/").rsplit("/", 1)[-1].strip().lstrip(".").strip()
    if not text:
        return default
    if len(text) > _NAME_MAX:
        suffix = next((s for s in UPLOAD_SUFFIXES if text.lower().endswith(s)), "")
        text = text[: _NAME_MAX - len(suffix)].rstrip() + suffix
    return text
