"""Uploads: stored under MEDIA_ROOT, parsed by the REAL Celery worker on the `ingest` queue."""

from __future__ import annotations

import gzip
import json
import time
from typing import Any

import pytest
from django.conf import settings
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client, override_settings

from tests.traces.helpers import PIN_RUN, SAMPLES, sample_events
from traces.models import Event, Project, Run, Upload

pytestmark = pytest.mark.usefixtures("celery_worker_process", "transactional_db")


def wait_done(client: Client, url: str, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        body = client.get(url).json()
        if body["status"] in ("done", "failed"):
            return body
        if time.monotonic() > deadline:
            raise AssertionError(f"upload still {body['status']} after {timeout}s: {body}")
        time.sleep(0.2)


def test_it_works_with_a_session_and_multipart(alice_client: Client, project: Project) -> None:
    path = SAMPLES / "pin_recall" / f"{PIN_RUN}.jsonl"
    f = SimpleUploadedFile(path.name, path.read_bytes(), content_type="application/octet-stream")
    r = alice_client.post("/api/v1/uploads", {"file": f, "project": "alpha-app"})
    assert r.status_code == 202
    body = r.json()
    assert body["url"] == f"/api/v1/uploads/{body['id']}" and r["Location"] == body["url"]
    upload = Upload.objects.get(pk=body["id"])
    assert upload.file.path.startswith(str(settings.MEDIA_ROOT)) and upload.bytes == path.stat().st_size
    done = wait_done(alice_client, body["url"])
    assert done["status"] == "done"
    assert (done["lines_total"], done["lines_done"], done["accepted"], done["rejected"]) == (42, 42, 42, 0)
    assert done["runs"] == [PIN_RUN] and done["line_errors"] == []
    assert Run.objects.get(project=project, run_id=PIN_RUN).turns == 10


def test_it_accepts_a_browser_multipart_upload_with_csrf(alice: Any, project: Project) -> None:
    # A real browser: CSRF is enforced, the token travels in the X-CSRFToken header.
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(alice)
    browser.get("/uploads")
    token = browser.cookies["csrftoken"].value
    path = SAMPLES / "basic_chat" / "08b465c7-83c0-44d1-bad3-727f773cb988.jsonl"
    f = SimpleUploadedFile(path.name, path.read_bytes(), content_type="application/octet-stream")

    refused = browser.post("/api/v1/uploads", {"file": f, "project": "alpha-app"})
    assert refused.status_code == 403

    f.seek(0)
    r = browser.post("/api/v1/uploads", {"file": f, "project": "alpha-app"}, HTTP_X_CSRFTOKEN=token)
    assert r.status_code == 202, r.content
    body = wait_done(browser, r.json()["url"])
    assert (body["status"], body["accepted"], body["rejected"]) == ("done", 2, 0)
    assert Run.objects.filter(project=project, run_id=path.stem).exists()


def test_it_works_with_a_key_and_a_raw_gzip_body(api_client: Client, project: Project) -> None:
    events = sample_events()
    body = gzip.compress(b"\n".join(json.dumps(e).encode() for e in events) + b"\n")
    r = api_client.post("/api/v1/uploads", data=body, content_type="application/x-ndjson")
    assert r.status_code == 202
    done = wait_done(api_client, r.json()["url"])
    assert done["status"] == "done" and done["accepted"] == len(events)
    assert len(done["runs"]) == 9
    assert Event.objects.filter(project=project).count() == len(events)


def test_it_reports_line_errors_and_keeps_the_good_lines(api_client: Client, project: Project) -> None:
    good = [json.dumps(e).encode() for e in sample_events("08b465c7")]
    lines = [
        good[0],
        b"not json",
        b'"a string"',
        b'{"run_id": "r", "step_id": "s"}',
        b'{"run_id": "r',
        good[1],
    ]
    body = b"\xef\xbb\xbf" + b"\r\n".join(lines) + b"\r\n"
    r = api_client.post("/api/v1/uploads", data=body, content_type="application/x-ndjson")
    done = wait_done(api_client, r.json()["url"])
    assert done["status"] == "done"
    assert (done["accepted"], done["rejected"], done["lines_done"]) == (2, 4, 6)
    assert done["line_errors"] == [
        {"line": 2, "message": "not valid JSON: Expecting value at column 1"},
        {"line": 3, "message": "event must be a JSON object, got string"},
        {"line": 4, "field": "event_type", "message": "missing required field 'event_type'"},
        # Python says "Unterminated string starting at": the column follows once ("at at" before).
        {"line": 5, "message": "not valid JSON: Unterminated string starting at column 12"},
    ]


def test_it_keeps_what_a_truncated_gzip_held(api_client: Client, project: Project) -> None:
    events = sample_events()
    data = gzip.compress(b"\n".join(json.dumps(e).encode() for e in events) + b"\n")
    r = api_client.post(
        "/api/v1/uploads", data=data[: int(len(data) * 0.6)], content_type="application/x-ndjson"
    )
    done = wait_done(api_client, r.json()["url"])
    assert done["status"] == "done" and 0 < done["accepted"] < len(events)
    assert done["line_errors"][-1]["message"].endswith("(truncated gzip)")
    # The counts agree with what was read: every whole line, and the line where reading stopped.
    assert done["lines_total"] == done["lines_done"] == done["accepted"] + done["rejected"]


def test_it_counts_the_lines_of_a_small_truncated_gzip(api_client: Client, project: Project) -> None:
    events = sample_events("08b465c7")
    data = gzip.compress(b"\n".join(json.dumps(e).encode() for e in events) + b"\n")
    r = api_client.post("/api/v1/uploads", data=data[:-10], content_type="application/x-ndjson")
    done = wait_done(api_client, r.json()["url"])
    assert done["accepted"] == len(events) - 1 and done["rejected"] == 1
    assert done["lines_total"] == done["lines_done"] == len(events)


def test_it_checks_team_access(api_client: Client, charlie_client: Client, project: Project) -> None:
    r = api_client.post("/api/v1/uploads", data=b"\n", content_type="application/x-ndjson")
    url = r.json()["url"]
    wait_done(api_client, url)
    assert charlie_client.get(url).status_code == 404
    f = SimpleUploadedFile("x.jsonl", b"{}\n")
    assert charlie_client.post("/api/v1/uploads", {"file": f, "project": "alpha-app"}).status_code == 404


def test_it_requires_login(client: Client, project: Project) -> None:
    assert (
        client.post("/api/v1/uploads", data=b"{}\n", content_type="application/x-ndjson").status_code == 401
    )


def test_it_rejects_other_file_types(alice_client: Client, project: Project) -> None:
    f = SimpleUploadedFile("notes.txt", b"hello")
    r = alice_client.post("/api/v1/uploads", {"file": f, "project": "alpha-app"})
    assert r.status_code == 400 and r.json()["error"] == "file must be .jsonl or .jsonl.gz, got 'notes.txt'"


@override_settings(ARCANA_MAX_UPLOAD_BYTES=2048)
def test_it_refuses_a_file_over_the_limit(api_client: Client) -> None:
    r = api_client.post("/api/v1/uploads", data=b"x" * 100_000, content_type="application/x-ndjson")
    assert r.status_code == 413 and Upload.objects.count() == 0
