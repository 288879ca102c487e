"""Start real Celery worker processes for the conversation tests, each with a data folder of its own.

    with worker(env={"ARCANA_PROVIDERS": ...}) as w:      # ready once it answered a ping
        ...
        w.kill()                                           # SIGKILL (the task dies mid-turn)

A worker shares nothing with the test process but the database (`DATABASE_URL` of the test database)
and the broker (the embedded broker's folder via `ARCANA_BROKER_DIR`, or `CELERY_BROKER_URL`), as
on a separate machine. It consumes `settings.ARCANA_AGENTS_QUEUE` — the tests set a queue name of
their own, so a worker another test module started never takes their tasks — plus a private queue
used to ping it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from django.conf import settings

from arcana_site.celery import app
from tests.conftest import ROOT, test_database_url


class Worker:
    def __init__(self, proc: subprocess.Popen[bytes], data_dir: Path, log: Path) -> None:
        self.proc = proc
        self.data_dir = data_dir
        self.log = log

    @property
    def pid(self) -> int:
        return self.proc.pid

    def kill(self) -> None:
        """SIGKILL the whole worker (solo pool: the task runs in this very process)."""
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def broker_env() -> dict[str, str]:
    """What a worker needs to reach the test session's broker."""
    env = {"CELERY_BROKER_URL": str(settings.CELERY_BROKER_URL)}
    options = getattr(settings, "CELERY_BROKER_TRANSPORT_OPTIONS", None) or {}
    if str(settings.CELERY_BROKER_URL).startswith("filesystem://"):
        env["ARCANA_BROKER_DIR"] = str(Path(options["data_folder_in"]).parent)
        env.pop("CELERY_BROKER_URL")
    env["CELERY_RESULT_BACKEND"] = str(settings.CELERY_RESULT_BACKEND)
    return env


@contextmanager
def worker(
    *,
    env: Mapping[str, str] | None = None,
    beat: bool = False,
    pool: str = "solo",
    timeout: float = 60,
) -> Iterator[Worker]:
    """A `celery worker` (solo pool, or `pool="prefork"` with one child as `scripts/run` starts it)
    on the agents queue of these tests, with its own data folder."""
    data_dir = Path(tempfile.mkdtemp(prefix="arcana-worker-"))
    private = f"ping-{uuid.uuid4().hex[:8]}"
    full_env = dict(os.environ)
    full_env.update(
        {
            "ARCANA_DATA_DIR": str(data_dir),
            "DATABASE_URL": test_database_url(),
            "DJANGO_SETTINGS_MODULE": "arcana_site.test_settings",
            "ARCANA_AGENTS_QUEUE": str(settings.ARCANA_AGENTS_QUEUE),
            "ARCANA_PROVIDERS": str(settings.ARCANA_PROVIDERS),
        }
    )
    full_env.update(broker_env())
    full_env.update(env or {})
    log = data_dir / "worker.log"
    args = [
        sys.executable, "-m", "celery", "-A", "arcana_site", "worker",
        "-Q", f"{settings.ARCANA_AGENTS_QUEUE},{private}",
        "--pool", pool, "--concurrency", "1", "--loglevel", "INFO",
        "--without-gossip", "--without-mingle", "--without-heartbeat",
        "-n", f"{private}@%h",
    ]  # fmt: skip
    if beat:
        args += ["-B", "-s", str(data_dir / "beat-schedule")]
    with open(log, "wb") as out:
        proc = subprocess.Popen(args, cwd=ROOT, env=full_env, stdout=out, stderr=subprocess.STDOUT)
    w = Worker(proc, data_dir, log)
    try:
        result = app.send_task("traces.tasks.ping", args=["ready"], queue=private)
        deadline = time.monotonic() + timeout
        while not settle_when_ready(result):
            if proc.poll() is not None:
                raise RuntimeError(f"worker exited with {proc.returncode}:\n{w.log_text()[-3000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"worker did not answer a ping within {timeout} s:\n{w.log_text()[-3000:]}"
                )
            time.sleep(0.1)
        yield w
    finally:
        w.stop()


def settle_when_ready(result: Any) -> bool:
    """Whether the task of `result` (an AsyncResult) has finished, read with a plain GET of its key;
    once it has, its Redis subscription is dropped here and its `__del__` disarmed.

    Why: with the Redis result backend an AsyncResult subscribes to its channel and unsubscribes from
    `__del__`, which the garbage collector may run in the middle of another Redis command of the same
    thread, deadlocking it on the connection's lock (it hung a full PostgreSQL + Redis run: a worker's
    ping in the playground test waited forever). Our own tasks that nobody waits for set ignore_result."""
    if app.backend.get_task_meta(result.id).get("status") not in ("SUCCESS", "FAILURE"):
        return False
    app.backend.remove_pending_result(result)
    result.backend = None  # AsyncResult.__del__ does nothing without a backend
    return True


def wait_for(
    predicate: object, *, timeout: float = 60, interval: float = 0.1, what: str = "condition"
) -> None:
    """Poll `predicate()` until it is truthy; AssertionError naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")
