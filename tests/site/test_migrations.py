"""Migrations are complete and apply on a fresh SQLite file and a fresh PostgreSQL database."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.conftest import ROOT


def _manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "SECRET_KEY": "x", "DJANGO_SETTINGS_MODULE": "arcana_site.settings", **env}
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=full, capture_output=True, text=True, timeout=300
    )


def test_it_has_no_missing_migrations(tmp_path: Path) -> None:
    result = _manage(
        "makemigrations", "--check", "--dry-run", env={"DATABASE_URL": f"sqlite:///{tmp_path}/m.db"}
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_it_migrates_a_fresh_sqlite_file(tmp_path: Path) -> None:
    result = _manage("migrate", "--noinput", env={"DATABASE_URL": f"sqlite:///{tmp_path}/fresh.db"})
    assert result.returncode == 0, result.stderr
    shown = _manage("showmigrations", "traces", env={"DATABASE_URL": f"sqlite:///{tmp_path}/fresh.db"})
    assert "[X] 0001_initial" in shown.stdout
    assert "[ ]" not in shown.stdout


def _postgres_admin_conn():  # type: ignore[no-untyped-def]
    psycopg = pytest.importorskip("psycopg")
    try:
        return psycopg.connect(
            "postgresql://postgres@127.0.0.1:5432/postgres", autocommit=True, connect_timeout=3
        )
    except psycopg.OperationalError as exc:
        if os.environ.get("ARCANA_REQUIRE_SERVICES") == "1":
            pytest.fail(f"PostgreSQL is required (ARCANA_REQUIRE_SERVICES=1) but unreachable: {exc}")
        pytest.skip(f"PostgreSQL not reachable on 127.0.0.1:5432: {exc}")


def test_it_migrates_a_fresh_postgres_database() -> None:
    admin = _postgres_admin_conn()
    name = f"arcana_migrate_{uuid.uuid4().hex[:8]}"
    admin.execute(f'CREATE DATABASE "{name}"')
    try:
        url = f"postgres://postgres@127.0.0.1:5432/{name}"
        result = _manage("migrate", "--noinput", env={"DATABASE_URL": url})
        assert result.returncode == 0, result.stderr
        shown = _manage("showmigrations", "traces", env={"DATABASE_URL": url})
        assert "[X] 0001_initial" in shown.stdout
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()
