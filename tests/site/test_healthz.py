"""GET /healthz reports database and broker status; 503 when either is down."""

from __future__ import annotations

import pytest
from django.db import OperationalError
from django.test import Client, override_settings

pytestmark = pytest.mark.django_db


def test_it_reports_database_and_broker_ok(client: Client) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok"
    assert body["database"]["ok"] is True
    assert body["broker"]["ok"] is True
    assert response["Cache-Control"].startswith("max-age=0")


def test_it_returns_503_when_the_broker_is_unreachable(client: Client) -> None:
    # Port 1 on loopback: nothing listens there, so the connection is refused at once.
    with override_settings(CELERY_BROKER_URL="redis://127.0.0.1:1/0"):
        response = client.get("/healthz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unavailable"
    assert body["broker"]["ok"] is False
    assert body["database"]["ok"] is True


def test_it_returns_503_when_the_database_fails(client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    from django.db import connection

    def broken_cursor(*args: object, **kwargs: object) -> None:
        raise OperationalError("connection refused")

    # Fault injection at the driver boundary: the view must report, not crash.
    monkeypatch.setattr(connection, "cursor", broken_cursor)
    response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["database"] == {"ok": False, "error": "OperationalError: connection refused"}


def test_it_returns_503_when_the_file_broker_folder_is_gone(client: Client, tmp_path) -> None:  # type: ignore[no-untyped-def]
    options = {"data_folder_in": str(tmp_path / "gone"), "data_folder_out": str(tmp_path / "gone")}
    with override_settings(CELERY_BROKER_URL="filesystem://", CELERY_BROKER_TRANSPORT_OPTIONS=options):
        response = client.get("/healthz")
    assert response.status_code == 503
    assert "is missing or not writable" in response.json()["broker"]["error"]


def test_it_lists_the_workers_seen_per_queue(client: Client) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from traces.core.workers import SEEN_WITHIN_SECONDS, beat
    from traces.models import WorkerHeartbeat

    beat("w1@machine-a", ["ingest", "agents"])
    beat("w2@machine-b", ["agents"])
    stale = timezone.now() - timedelta(seconds=SEEN_WITHIN_SECONDS + 1)
    WorkerHeartbeat.objects.create(hostname="gone@machine-c", queues=["ingest"], last_seen=stale)
    body = client.get("/healthz").json()
    assert body["workers"]["queues"] == {
        "agents": {"count": 2, "names": ["w1@machine-a", "w2@machine-b"]},
        "ingest": {"count": 1, "names": ["w1@machine-a"]},
    }
