"""The run's running totals (`Run.tally` and the counters the turn-by-turn path adds to): any split of
the same events into batches gives the run row of one whole-run rebuild, and the stored tally equals a
recount of the run's events and rows."""

from __future__ import annotations

import json
import random
import uuid
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from runtime import TraceEvent
from runtime.facts import status_from_last
from tests.traces.helpers import our_run, projection_snapshot
from traces.ingest import do_rebuild_projections, ingest_events
from traces.ingest.counters import Tally, _run_summary
from traces.ingest.events import sort_key
from traces.models import Event, Project, Run, Step

EVENTS = our_run("tally-1", agents=("planner", "critic"), turns=3, steps=2)


def assert_tally_is_a_recount(run: Run) -> None:
    """The run's stored tally (when valid) against its events and step rows, counted afresh."""
    tally = Tally.load(run)
    if tally is None:
        return
    events = [
        TraceEvent.from_dict(json.loads(raw))
        for raw in Event.objects.filter(project_id=run.project_id, run_id=run.run_id).values_list(
            "raw", flat=True
        )
    ]
    last = max(events, key=sort_key)
    turns = [ev for ev in events if ev.event_type == "turn"]
    last_turn = max(turns, key=sort_key) if turns else None
    models = Counter(m for m in Step.objects.filter(run=run).values_list("model", flat=True) if m)
    assert tally.models == models
    assert tally.last[:2] == sort_key(last)
    stored_turn = tally.last_turn[:2] if tally.last_turn is not None else None
    assert stored_turn == (sort_key(last_turn) if last_turn is not None else None)
    assert tally.status() == status_from_last(last, last_turn) == run.status


def stream(project: Project, events: list[dict[str, Any]], sizes: list[int]) -> None:
    i, k = 0, 0
    while i < len(events):
        n = sizes[k % len(sizes)]
        ingest_events(project, events[i : i + n], source="api")
        assert_tally_is_a_recount(Run.objects.get(project=project))
        i, k = i + n, k + 1


@pytest.mark.django_db
@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    sizes=st.lists(st.integers(min_value=1, max_value=15), min_size=1, max_size=8),
    seed=st.integers(min_value=0, max_value=2**16),
    shuffle=st.booleans(),
)
@example(sizes=[1], seed=41, shuffle=True)  # early batches without any `turn` event
def test_any_batch_split_gives_the_run_row_of_a_whole_run_rebuild(
    sizes: list[int], seed: int, shuffle: bool, project: Project
) -> None:
    events = EVENTS[:]
    if shuffle:
        random.Random(seed).shuffle(events)
    tag = uuid.uuid4().hex[:12]  # hypothesis reruns examples in the same database transaction
    whole = Project.objects.create(team=project.team, slug=f"whole-{tag}")
    ingest_events(whole, events, source="api")
    split = Project.objects.create(team=project.team, slug=f"split-{tag}")
    stream(split, events, sizes)
    assert projection_snapshot(split) == projection_snapshot(whole)
    do_rebuild_projections(project=split)
    assert projection_snapshot(split) == projection_snapshot(whole)
    Project.objects.filter(pk__in=[whole.pk, split.pk]).delete()


@pytest.mark.django_db
def test_a_stream_in_order_keeps_its_totals_by_addition(project: Project, turn_by_turn: list[bool]) -> None:
    """In order, every batch after the first goes turn by turn; from the third on the tally is the one
    the previous batch stored (no recount), and the run row is still the whole-run rebuild's."""
    stream(project, EVENTS, [4])
    assert turn_by_turn and all(turn_by_turn)
    run = Run.objects.get(project=project)
    assert Tally.load(run) is not None
    before = projection_snapshot(project)
    do_rebuild_projections(project=project)
    assert projection_snapshot(project) == before
    # A whole-run projection moves `updated_at` on: the stored tally no longer counts (recomputed later).
    assert Tally.load(Run.objects.get(project=project)) is None


@pytest.mark.django_db
def test_a_whole_run_projection_leaves_the_tally_a_recount_gives(project: Project) -> None:
    """A batch the turn-by-turn path hands over (the run projected whole) between two that it takes:
    the whole-run projection writes a new tally, equal to a recount of the run's rows, and the later
    batches count from it."""
    half = len(EVENTS) // 2
    stream(project, EVENTS[:half], [5])
    run = Run.objects.get(project=project)
    before = Tally.load(run)
    assert before is not None
    Run.objects.filter(pk=run.pk).update(incremental=False)  # the next batch goes whole-run
    ingest_events(project, EVENTS[half : half + 3], source="api")
    run = Run.objects.get(project=project)
    after = Tally.load(run)
    assert after is not None and after != before and run.incremental
    stored = [
        TraceEvent.from_dict(json.loads(raw))
        for raw in Event.objects.filter(run_id=run.run_id).values_list("raw", flat=True)
    ]
    first = min(stored, key=sort_key)
    first_turn = min((ev for ev in stored if ev.event_type == "turn"), key=sort_key)
    assert after == Tally.of(_run_summary(project, run, first, first_turn))
    stream(project, EVENTS[half + 3 :], [5])
    whole = Project.objects.create(team=project.team, slug="whole")
    ingest_events(whole, EVENTS, source="api")
    assert projection_snapshot(project) == projection_snapshot(whole)
