"""Work survives a dead worker and a dead broker (DESIGN.md §7), with real processes: a Celery worker
killed with SIGKILL in the middle of a large upload, a web server whose broker is a closed port.

Each test uses a queue of its own (`ARCANA_INGEST_QUEUE`), so the session's shared worker never takes
its tasks, and short leases and sweeps (seconds) so recovery is quick."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.test import override_settings

from tests.conftest import ROOT, test_database_url
from tests.traces.views_helpers import jsonl_lines
from traces.models import Event, Project, Run, Upload

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

FAST_RECOVERY = {
    "ARCANA_UPLOAD_LEASE_SECONDS": "2",
    "ARCANA_UPLOAD_SWEEP_SECONDS": "1",
    "ARCANA_UPLOAD_RESEND_SECONDS": "2",
}


def _env(queue: str, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(FAST_RECOVERY)
    env.update(
        DATABASE_URL=test_database_url(),
        DJANGO_SETTINGS_MODULE="arcana_site.test_settings",
        ARCANA_INGEST_QUEUE=queue,
        **extra,
    )
    return env


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """Start a process in a session of its own (so SIGKILL takes its children too); all are stopped at
    the end of the test."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(args: list[str], env: dict[str, str], log: str) -> subprocess.Popen[bytes]:
        out = open(tmp_path / log, "wb")  # noqa: SIM115  (the process writes it; closed with the test)
        proc = subprocess.Popen(
            args, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        out.close()
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _worker_args(queue: str, name: str, *, beat: Path | None = None) -> list[str]:
    args = [sys.executable, "-m", "celery", "-A", "arcana_site", "worker", "-Q", queue, "--concurrency", "1"]
    args += [
        "--loglevel",
        "WARNING",
        "--without-gossip",
        "--without-mingle",
        "-n",
        f"{name}-{uuid.uuid4().hex[:6]}@%h",
    ]
    if beat is not None:  # the sweeper's schedule, run inside this worker (as scripts/run does)
        args += ["-B", "--schedule", str(beat)]
    return args


def _wait(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {timeout:.0f}s")
        time.sleep(0.05)


def _post_upload(base: str, key: str, body: bytes) -> httpx.Response:
    return httpx.post(
        f"{base}/api/v1/uploads?filename=big.jsonl",
        content=body,
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/x-ndjson"},
        timeout=30,
    )


def _assert_exact(upload: Upload, project: Project, lines: int, runs: int) -> None:
    upload.refresh_from_db()
    assert upload.status == Upload.Status.DONE, (upload.status, upload.error)
    assert (upload.lines_done, upload.lines_total) == (lines, lines)
    assert (upload.accepted, upload.duplicates, upload.rejected) == (lines, 0, 0)
    events = Event.objects.filter(project=project)
    assert events.count() == lines
    assert events.values("run_id", "step_id").distinct().count() == lines
    assert Run.objects.filter(project=project).count() == runs
    assert sum(r.events for r in Run.objects.filter(project=project)) == lines


def test_a_killed_workers_upload_is_finished_by_the_next_worker_exactly_once(
    live_server: Any,
    project: Project,
    api_key: str,
    spawn: Callable[..., subprocess.Popen[bytes]],
    tmp_path: Path,
) -> None:
    queue = f"test-recovery-{uuid.uuid4().hex[:8]}"
    lines = jsonl_lines(40, 250, prefix="kill")  # 20,000 events in 40 runs
    with override_settings(ARCANA_INGEST_QUEUE=queue):
        r = _post_upload(live_server.url, api_key, ("\n".join(lines) + "\n").encode())
    assert r.status_code == 202, r.text
    upload = Upload.objects.get(pk=r.json()["id"])

    first = spawn(_worker_args(queue, "doomed"), _env(queue), "doomed.log")
    # Let it commit a few chunks, then kill it (and its pool process) in the middle of the file.
    _wait(
        lambda: Upload.objects.filter(pk=upload.pk, lines_done__gte=1500).exists(),
        60,
        "the first worker did not get going",
    )
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(timeout=10)
    upload.refresh_from_db()
    assert upload.status == Upload.Status.RUNNING and 0 < upload.lines_done < len(lines), upload.lines_done
    killed_at = upload.lines_done

    spawn(_worker_args(queue, "rescuer", beat=tmp_path / "beat-schedule"), _env(queue), "rescuer.log")
    _wait(
        lambda: Upload.objects.filter(pk=upload.pk, status__in=["done", "failed"]).exists(),
        120,
        "the upload was not finished by the second worker",
    )
    _assert_exact(upload, project, len(lines), runs=40)
    assert upload.attempts == 2 and upload.lines_done > killed_at


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_upload_accepted_while_the_broker_is_down_runs_once_it_is_back(
    project: Project, api_key: str, spawn: Callable[..., subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    queue = f"test-broker-down-{uuid.uuid4().hex[:8]}"
    dead = f"redis://127.0.0.1:{_closed_port()}/3"
    port = _closed_port()
    web = spawn(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "arcana_site.wsgi",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            "1",
        ],
        _env(queue, CELERY_BROKER_URL=dead, CELERY_RESULT_BACKEND=dead),
        "web.log",
    )
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            # The login page needs no broker (/healthz would wait on the dead one).
            return httpx.get(f"{base}/accounts/login/", timeout=5).status_code == 200
        except httpx.HTTPError:
            assert web.poll() is None, (tmp_path / "web.log").read_text()
            return False

    _wait(up, 60, "the web server did not start")
    lines = jsonl_lines(3, 20, prefix="brokerless")
    started = time.monotonic()
    r = _post_upload(base, api_key, ("\n".join(lines) + "\n").encode())
    took = time.monotonic() - started
    # Accepted at once (no 500 after a long wait): the row is queued, its message not sent.
    assert r.status_code == 202, r.text
    assert took < 5, f"the request took {took:.1f}s with the broker down"
    upload = Upload.objects.get(pk=r.json()["id"])
    assert upload.status == Upload.Status.QUEUED and upload.queued_at is not None
    assert r.json()["status"] == "queued"

    # The broker is back (the worker and its sweeper use the real one): the sweeper sends it again.
    spawn(_worker_args(queue, "after-outage", beat=tmp_path / "beat-schedule"), _env(queue), "worker.log")
    _wait(
        lambda: Upload.objects.filter(pk=upload.pk, status__in=["done", "failed"]).exists(),
        90,
        "the upload accepted during the outage never ran",
    )
    _assert_exact(upload, project, len(lines), runs=3)
