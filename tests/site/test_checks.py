"""System checks warn about risky combinations with stable ids."""

from __future__ import annotations

from django.test import override_settings

from traces.checks import check_embedded_broker_in_production, sqlite_concurrency_warnings


def test_it_warns_about_sqlite_with_several_worker_processes() -> None:
    sqlite, postgres = "django.db.backends.sqlite3", "django.db.backends.postgresql"
    assert [w.id for w in sqlite_concurrency_warnings(sqlite, 3)] == ["arcana.W001"]
    assert sqlite_concurrency_warnings(sqlite, 1) == []
    assert sqlite_concurrency_warnings(postgres, 8) == []


def test_it_warns_about_the_file_broker_in_production() -> None:
    with override_settings(DEBUG=False, CELERY_BROKER_URL="filesystem://"):
        assert [w.id for w in check_embedded_broker_in_production()] == ["arcana.W002"]
    with override_settings(DEBUG=False, CELERY_BROKER_URL="redis://127.0.0.1:6379/0"):
        assert check_embedded_broker_in_production() == []
