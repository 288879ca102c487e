"""Model behaviour that belongs to one row: pin lifetimes, active pins, key hashing, status helpers."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.test import override_settings
from django.utils import timezone

from traces.models import ApiKey, Pin, Project, Run, Turn


def _run(project: Project) -> Run:
    return Run.objects.create(project=project, run_id="r1", started_at=timezone.now())


def test_it_judges_pin_lifetimes_as_of_a_turn(project: Project) -> None:
    run = _run(project)
    constraints = Pin.objects.create(run=run, pin_id="p_1", label="constraints", created_turn=1, until_turn=3)
    customer = Pin.objects.create(run=run, pin_id="p_2", label="customer", created_turn=3, unpinned_turn=8)
    assert [t for t in range(1, 10) if constraints.is_active_at(t)] == [1, 2, 3]
    assert [t for t in range(1, 10) if customer.is_active_at(t)] == [3, 4, 5, 6, 7, 8]
    assert list(run.active_pins_at(3)) == [constraints, customer]
    assert list(run.active_pins_at(5)) == [customer]
    assert list(run.active_pins_at(9)) == []


def test_it_filters_active_pins_by_agent(project: Project) -> None:
    run = _run(project)
    Pin.objects.create(run=run, agent="a", pin_id="p_1", created_turn=1)
    b = Pin.objects.create(run=run, agent="b", pin_id="p_1", created_turn=1)
    assert list(run.active_pins_at(1, agent="b")) == [b]
    assert len(run.active_pins_at(1)) == 2


def test_it_serializes_a_turn(project: Project) -> None:
    turn = Turn.objects.create(
        run=_run(project), agent="", number=2, steps=3, tokens=120, strategy="passthrough"
    )
    data = turn.to_dict()
    assert data["number"] == 2 and data["steps"] == 3 and data["tokens"] == 120
    assert data["strategy"] == "passthrough" and data["started_at"] is None


def test_it_stores_only_a_hash_of_api_keys(project: Project, alice: Any) -> None:
    key, raw = ApiKey.issue(project, name="ci")
    key.refresh_from_db()
    assert raw.startswith("arc_") and len(raw) > 30
    assert key.key_hash == ApiKey.hash_key(raw) and raw not in key.key_hash
    assert raw.startswith(key.prefix)
    assert key.is_active
    key.revoke()
    key.refresh_from_db()
    assert not key.is_active and key.revoked_at is not None


def test_it_reports_run_status(project: Project) -> None:
    run = _run(project)
    assert run.is_running and not run.is_completed and not run.is_failed
    run.status = Run.Status.COMPLETED
    assert run.is_completed and not run.has_primitives


def test_it_tells_a_live_run_from_an_idle_one_by_the_clock(project: Project) -> None:
    now = timezone.now()
    run = Run.objects.create(project=project, run_id="r1", started_at=now, ended_at=now, updated_at=now)
    with override_settings(ARCANA_LIVE_WINDOW_SECONDS=120):
        assert run.is_live and not run.is_idle
        # Nothing new for three minutes: the same row, read later, is idle (no re-ingest needed).
        run.ended_at = run.updated_at = now - timedelta(seconds=180)
        assert not run.is_live and run.is_idle
    with override_settings(ARCANA_LIVE_WINDOW_SECONDS=600):
        assert run.is_live
    run.status = Run.Status.COMPLETED
    assert not run.is_live and not run.is_idle


def test_it_judges_liveness_by_the_older_of_last_event_and_last_ingest(project: Project) -> None:
    now = timezone.now()
    old = now - timedelta(days=30)
    # An old file uploaded just now: its last event is a month old.
    uploaded = Run(project=project, run_id="r1", ended_at=old, updated_at=now)
    # A producer whose clock runs ahead, silent since a month: its own stamps look fresh.
    ahead = Run(project=project, run_id="r2", ended_at=now + timedelta(hours=1), updated_at=old)
    assert not uploaded.is_live and not ahead.is_live
    assert uploaded.last_activity == old and ahead.last_activity == old
