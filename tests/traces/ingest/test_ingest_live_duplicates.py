"""A live stream that re-sends events (a producer retrying after a timeout): each event is stored once,
the re-sent ones are reported `duplicate`, and the run's rows equal those of one clean ingest. On
PostgreSQL a live batch to a run with events is written by `insert_new_events` (the unique index is the
arbiter), a larger one in a savepoint that the unique index rolls back when it refuses a stored event
(`_insert_unless_stored`, then `_stored_keys`); SQLite asks `_stored_keys` first: every way is run here."""

from __future__ import annotations

import random
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.traces.helpers import our_run, projection_snapshot
from traces.ingest import ingest_events
from traces.models import Event, Project, Team

EVENTS = our_run("live-dups", agents=("planner",), turns=4, steps=2)


def _fresh_project(slug: str) -> Project:
    team = Team.objects.create(name=f"team {slug}")
    return Project.objects.create(team=team, slug=slug)


@pytest.mark.django_db(transaction=True)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(size=st.integers(min_value=1, max_value=30), seed=st.integers(min_value=0, max_value=10_000))
def test_resent_events_are_duplicates_and_the_run_is_as_if_sent_once(size: int, seed: int) -> None:
    rng = random.Random(seed)
    clean = _fresh_project(f"clean-{seed}-{size}")
    assert ingest_events(clean, EVENTS, source="api").accepted == len(EVENTS)

    live = _fresh_project(f"live-{seed}-{size}")
    sent: set[str] = set()
    for start in range(0, len(EVENTS), size):
        batch = EVENTS[start : start + size]
        # Re-send a few events already stored, in the same batch as new ones.
        again = rng.sample(EVENTS[:start], min(start, rng.randint(0, 3)))
        result = ingest_events(live, again + batch, source="api")
        statuses: list[Any] = [r.status for r in result.results]
        assert statuses == ["duplicate"] * len(again) + ["accepted"] * len(batch)
        sent.update(e["step_id"] for e in batch)
    # The same batch once more: nothing new.
    assert ingest_events(live, EVENTS[:size], source="api").duplicates == min(size, len(EVENTS))

    assert Event.objects.filter(project=live).count() == len(EVENTS) == len(sent)
    assert projection_snapshot(live) == projection_snapshot(clean)


LONG = our_run("long-dups", agents=("planner", "critic"), turns=12, steps=3)
_PROBE = "AS k(run_id, step_id)"  # in `_stored_keys`' statement on PostgreSQL


@pytest.mark.django_db(transaction=True)
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(size=st.integers(min_value=60, max_value=150), seed=st.integers(min_value=0, max_value=10_000))
def test_large_batches_that_resend_events_store_each_once(size: int, seed: int) -> None:
    """Batches over the live size that continue a run: on PostgreSQL written as if nothing were stored
    (a savepoint; the unique index refuses a stored event, then the stored ones are asked for)."""
    rng = random.Random(seed)
    clean = _fresh_project(f"clean-long-{seed}-{size}")
    assert ingest_events(clean, LONG, source="api").accepted == len(LONG)

    live = _fresh_project(f"live-long-{seed}-{size}")
    for start in range(0, len(LONG), size):
        batch = LONG[start : start + size]
        again = rng.sample(LONG[:start], min(start, rng.randint(0, 5)))
        mixed = again + batch
        rng.shuffle(mixed)
        result = ingest_events(live, mixed, source="api")
        resent = {e["step_id"] for e in again}
        assert [r.status for r in result.results] == [
            "duplicate" if e["step_id"] in resent else "accepted" for e in mixed
        ]
    # A whole batch once more: every event a duplicate.
    assert ingest_events(live, LONG[:size], source="api").duplicates == size

    assert Event.objects.filter(project=live).count() == len(LONG)
    assert projection_snapshot(live) == projection_snapshot(clean)


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "postgresql", reason="the savepoint path is PostgreSQL's")
def test_a_large_batch_asks_for_stored_events_only_when_one_was_refused() -> None:
    project = _fresh_project("probe-only-on-refusal")
    first, rest = LONG[:100], LONG[100:]
    assert ingest_events(project, first, source="api").accepted == 100

    with CaptureQueriesContext(connection) as clean:
        assert ingest_events(project, rest[:80], source="api").accepted == 80
    sql = [q["sql"] for q in clean.captured_queries]
    assert not any(_PROBE in s for s in sql)
    assert not any("ROLLBACK TO SAVEPOINT" in s for s in sql)

    with CaptureQueriesContext(connection) as replay:
        result = ingest_events(project, first[-5:] + rest[80:160], source="api")
    assert (result.duplicates, result.accepted) == (5, 80)
    sql = [q["sql"] for q in replay.captured_queries]
    assert any("ROLLBACK TO SAVEPOINT" in s for s in sql)
    assert sum(_PROBE in s for s in sql) == 1
