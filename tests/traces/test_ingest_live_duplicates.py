"""A live stream that re-sends events (a producer retrying after a timeout): each event is stored once,
the re-sent ones are reported `duplicate`, and the run's rows equal those of one clean ingest. On
PostgreSQL a live batch to a run with events is written by `insert_new_events` (the unique index is the
arbiter); larger batches and SQLite ask `_stored_keys` first: both ways are run here."""

from __future__ import annotations

import random
from typing import Any

import pytest
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
