"""An upload's lease, cursor and sweeper (traces/ingest/uploads.py), driven in this process against the real
database: every line is counted exactly once however the work is interrupted. The same paths with real
worker processes, SIGKILL and a dead broker are in tests/site/test_upload_recovery.py."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.core.files.base import ContentFile
from django.db import transaction
from django.test import override_settings
from django.utils import timezone

from tests.traces.views_helpers import jsonl_lines
from traces import ingest
from traces.ingest import uploads
from traces.models import Event, Project, Run, Upload


def make_upload(project: Project, lines: list[str], name: str = "big.jsonl") -> Upload:
    upload = Upload(project=project, original_name=name, bytes=0)
    body = ("\n".join(lines) + "\n").encode()
    upload.file.save(name, ContentFile(body), save=False)
    upload.bytes = len(body)
    upload.save()
    return upload


def assert_exact(upload: Upload, lines: list[str], bad: int = 0) -> None:
    upload.refresh_from_db()
    good = len(lines) - bad
    assert upload.status == Upload.Status.DONE, upload.error
    assert (upload.lines_done, upload.lines_total) == (len(lines), len(lines))
    assert (upload.accepted, upload.duplicates, upload.rejected) == (good, 0, bad)
    assert Event.objects.filter(project=upload.project).count() == good
    assert not upload.lease_owner and upload.lease_expires_at is None


def _chunks_then_die(upload: Upload, owner: str, chunks: int) -> None:
    """A worker that committed `chunks` chunks and then died in the middle of the next one (whose
    transaction, with its events, therefore never committed)."""
    assert uploads.claim(upload.pk, owner)
    with upload.file.open("rb") as fh:
        Upload.objects.filter(pk=upload.pk).update(lines_total=ingest.count_lines(fh))
    with upload.file.open("rb") as fh:
        cursor = 0
        for _ in range(chunks):
            result = ingest.ingest_jsonl(
                upload.project, fh, source="upload", chunk_lines=uploads.UPLOAD_CHUNK_LINES,
                on_chunk=lambda *_: True,
            )  # fmt: skip
            uploads._commit_chunk(upload.pk, owner, result, cursor, cursor + result.lines)
            cursor += result.lines
        with pytest.raises(RuntimeError), transaction.atomic():
            ingest.ingest_jsonl(
                upload.project, fh, source="upload", chunk_lines=uploads.UPLOAD_CHUNK_LINES,
                on_chunk=lambda *_: True,
            )  # fmt: skip
            raise RuntimeError("SIGKILL")  # the chunk's transaction dies with its worker


def _expire(upload: Upload) -> None:
    Upload.objects.filter(pk=upload.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))


@pytest.fixture
def quiet_queue() -> Any:
    """Messages the sweeper sends here go to a queue no worker reads (this test runs the task body)."""
    with override_settings(ARCANA_INGEST_QUEUE="test-unread-uploads"):
        yield


def test_it_resumes_a_dead_workers_upload_from_its_cursor_counting_each_line_once(
    project: Project, quiet_queue: None
) -> None:
    lines = jsonl_lines(12, 100)  # 2,400 lines: 4 chunks and a part
    upload = make_upload(project, lines)
    _chunks_then_die(upload, "ghost:1", chunks=2)
    upload.refresh_from_db()
    assert (upload.status, upload.lines_done, upload.accepted) == ("running", 1000, 1000)
    assert Event.objects.filter(project=project).count() == 1000  # the third chunk left nothing

    # The lease still runs: a redelivered task leaves the row alone, the sweeper too.
    assert uploads.process_upload(upload.pk) == {"upload": upload.pk, "skipped": "running"}
    assert uploads.sweep_uploads()["requeued"] == 0
    _expire(upload)
    assert uploads.sweep_uploads() == {"requeued": 1, "failed": 0, "resent": 0}
    upload.refresh_from_db()
    assert upload.status == Upload.Status.QUEUED and upload.lines_done == 1000

    assert uploads.process_upload(upload.pk)["status"] == "done"
    assert_exact(upload, lines)
    assert upload.attempts == 2 and Run.objects.filter(project=project).count() == 12
    assert all(run.turns == 100 for run in Run.objects.filter(project=project))


def test_it_numbers_line_errors_of_later_chunks_by_their_line_in_the_file(
    project: Project, quiet_queue: None
) -> None:
    lines = jsonl_lines(3, 200)  # 1,200 lines
    lines[10] = "{not json"
    lines[777] = "[1, 2"
    upload = make_upload(project, lines)
    assert uploads.process_upload(upload.pk)["status"] == "done"
    assert_exact(upload, lines, bad=2)
    assert [e["line"] for e in upload.line_errors] == [11, 778]


def test_a_stalled_worker_rolls_its_chunk_back_when_its_lease_was_taken_over(
    project: Project, quiet_queue: None
) -> None:
    lines = jsonl_lines(2, 300)
    upload = make_upload(project, lines)
    _chunks_then_die(upload, "slow:1", chunks=1)
    _expire(upload)
    uploads.sweep_uploads()
    assert uploads.process_upload(upload.pk)["status"] == "done"
    # The stalled worker wakes up and tries to commit the chunk it was holding: refused, rolled back.
    with pytest.raises(uploads.LeaseLost), transaction.atomic():
        extra = ingest.ingest_events(project, [json.loads(lines[0])], source="upload")
        uploads._commit_chunk(
            upload.pk, "slow:1", ingest.JsonlResult(lines=1, duplicates=extra.duplicates), 0, 1
        )
    assert_exact(upload, lines)


def test_it_fails_an_upload_whose_worker_was_lost_too_often(project: Project, quiet_queue: None) -> None:
    upload = make_upload(project, jsonl_lines(1, 5))
    with override_settings(ARCANA_UPLOAD_MAX_ATTEMPTS=2):
        for _ in range(2):
            assert uploads.claim(upload.pk, "crasher")
            _expire(upload)
        assert uploads.sweep_uploads()["failed"] == 1
    upload.refresh_from_db()
    assert upload.status == Upload.Status.FAILED and "lost 2 times" in upload.error


def test_it_sends_again_an_upload_left_queued(project: Project, quiet_queue: None) -> None:
    upload = make_upload(project, jsonl_lines(1, 5))
    Upload.objects.filter(pk=upload.pk).update(created_at=timezone.now() - timedelta(hours=1))
    with override_settings(ARCANA_UPLOAD_RESEND_SECONDS=60):
        assert uploads.sweep_uploads()["resent"] == 1
        upload.refresh_from_db()
        assert upload.queued_at is not None  # sent now: not again before the resend delay
        assert uploads.sweep_uploads()["resent"] == 0


def test_it_requeues_itself_from_the_cursor_when_its_time_budget_runs_out(
    project: Project, quiet_queue: None
) -> None:
    lines = jsonl_lines(2, 300)
    upload = make_upload(project, lines)
    assert uploads.process_upload(upload.pk, time_budget=0)["status"] == "requeued"
    upload.refresh_from_db()
    assert upload.status == Upload.Status.QUEUED and upload.queued_at is not None
    assert uploads.process_upload(upload.pk)["status"] == "done"
    assert_exact(upload, lines)
