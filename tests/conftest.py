"""Fixtures shared by the whole suite: a clean environment and a real Celery worker process."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"

# Variables that would change behaviour under test if they leaked in from the shell.
_LEAKY_ENV = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "OPENAI_API_KEY",
    "DEEPSEEK_API_KEY",
    "GEMINI_API_KEY",
    "KIMI_API_KEY",
    "GLM_API_KEY",
    "MINIMAX_API_KEY",
    "OLLAMA_API_KEY",
    "ARCANA_SERVER",
    "ARCANA_API_KEY",
    "ARCANA_TRACE_DIR",
)


@pytest.fixture(autouse=True)
def clean_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _LEAKY_ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def samples_dir() -> Path:
    """Real trace files written by arcana-agent 1.2.0 (copied from the shared samples)."""
    return FIXTURES / "arcana-1.2"


def test_database_url() -> str:
    """A DATABASE_URL naming the database the tests run against, for processes the tests start."""
    from django.conf import settings

    db = settings.DATABASES["default"]
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{Path(db['NAME']).resolve()}"
    auth = db["USER"] or ""
    if db.get("PASSWORD"):
        auth += f":{db['PASSWORD']}"
    host = db["HOST"] or "127.0.0.1"
    port = f":{db['PORT']}" if db["PORT"] else ""
    return f"postgres://{auth}{'@' if auth else ''}{host}{port}/{db['NAME']}"


test_database_url.__test__ = False  # type: ignore[attr-defined]  # a helper, not a test


@pytest.fixture(scope="session")
def celery_worker_process(
    django_db_setup: None, django_db_blocker: object
) -> Iterator[subprocess.Popen[bytes]]:
    """A real `celery worker` process on the configured broker, using the test database.

    Tests that rely on it must use `transactional_db` (the worker only sees committed rows)."""
    from arcana_site.celery import app

    env = dict(os.environ)
    env["DATABASE_URL"] = test_database_url()
    env["DJANGO_SETTINGS_MODULE"] = "arcana_site.test_settings"
    from django.conf import settings

    log_path = settings.DATA_DIR / "test-worker.log"
    log = open(log_path, "wb")  # noqa: SIM115  (closed below)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "arcana_site",
            "worker",
            "-Q",
            "ingest,agents",
            "--concurrency",
            "1",
            "--loglevel",
            "WARNING",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "-n",
            f"test-{os.getpid()}@%h",
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        from tests.traces.workers import settle_when_ready  # no AsyncResult left to the GC (it says why)

        result = app.send_task("traces.tasks.ping", args=["ready"], queue="ingest")
        deadline = time.monotonic() + 60
        while not settle_when_ready(result):
            if proc.poll() is not None:
                raise RuntimeError(f"celery worker exited with {proc.returncode}; see {log_path}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"celery worker did not answer a ping within 60 s; see {log_path}")
            time.sleep(0.1)
        assert app.backend.get_task_meta(result.id)["result"] == {"pong": "ready"}
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.fixture(scope="session", autouse=True)
def flush_by_delete() -> Iterator[None]:
    """On PostgreSQL, a transactional test (`transactional_db`, `live_server`) ends with Django's
    `flush`: one TRUNCATE of every table, which costs about 1.5 s each time (new files for every table
    and index). This deletes the rows instead, in one transaction that first locks every table as
    TRUNCATE does (so a worker still writing is waited for, then sees the tables empty) and checks the
    foreign keys at its end: the same empty tables, in tens of milliseconds. Sequences are not
    restarted, as TRUNCATE without RESTART IDENTITY does not restart them either; a test that asks for
    `reset_sequences` (or a flush that must cascade) gets Django's TRUNCATE."""
    try:
        from django.db.backends.postgresql.operations import DatabaseOperations
    except ImportError:  # no psycopg: SQLite only
        yield
        return
    truncate = DatabaseOperations.sql_flush
    # The rows `flush` has `post_migrate` write again (no test adds or removes any): kept, they are
    # found there instead of written anew, with the same ids.
    rebuilt = {"django_content_type", "auth_permission"}

    def sql_flush(
        self: Any, style: Any, tables: Any, *, reset_sequences: bool = False, allow_cascade: bool = False
    ) -> list[str]:
        if not tables or reset_sequences or allow_cascade:
            return truncate(self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade)
        names = [self.quote_name(table) for table in tables]
        return [
            f"LOCK TABLE {', '.join(names)} IN ACCESS EXCLUSIVE MODE;",
            "SET CONSTRAINTS ALL DEFERRED;",
            *(f"DELETE FROM {self.quote_name(table)};" for table in tables if table not in rebuilt),
        ]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(DatabaseOperations, "sql_flush", sql_flush)
        yield
