"""Ingest of our runtime's events (pool agents, several steps per turn), and two concurrent writers."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable

import pytest
from django.db import connection

from tests.traces.helpers import our_run, projection_snapshot
from traces.ingest import ingest_events
from traces.models import ContextDecision, Pin, Project, Run, Step, Turn


def test_it_projects_a_pool_run(project: Project) -> None:
    events = our_run("pool-1")
    assert ingest_events(project, events, source="worker").accepted == len(events)
    run = Run.objects.get(run_id="pool-1")
    assert run.source == Run.Source.RUNTIME and run.agents == ["critic", "planner"]
    assert (run.turns, run.steps, run.tool_calls, run.primitives) == (6, 12, 6, 3)
    assert run.tokens == 12 * 110 and run.model == "gpt-test" and run.status == Run.Status.COMPLETED
    assert run.peak_utilization == pytest.approx(0.32)
    turn = Turn.objects.get(run=run, agent="planner", number=2)
    assert (turn.steps, turn.tokens, turn.tool_calls, turn.strategy) == (2, 220, 1, "passthrough")
    step = Step.objects.get(run=run, agent="critic", turn_number=1, number=1)
    assert (
        step.assistant_text == "critic says 1.1"
        and step.latency_ms == 40
        and step.finish_reason == "tool_calls"
    )
    assert step.messages == [{"role": "assistant", "content": "critic says 1.1"}]
    decision = ContextDecision.objects.get(run=run, agent="planner", turn_number=2, step_number=2)
    assert decision.pinned_count == 1 and decision.message_decisions[-1]["pin_id"] == "p_plan0001"
    pins = {p.agent: p for p in Pin.objects.filter(run=run)}
    assert (
        pins["planner"].tokens == 12
        and pins["planner"].until_turn == 2
        and pins["planner"].unpinned_turn is None
    )
    assert pins["critic"].unpinned_turn == 2
    assert [p.agent for p in run.active_pins_at(3)] == []
    assert sorted(p.agent for p in run.active_pins_at(2)) == ["critic", "planner"]


@pytest.mark.parametrize("seed", [7, 8])
def test_it_converges_for_our_events_in_any_order(project: Project, seed: int) -> None:
    events = our_run("pool-2")
    ingest_events(project, events, source="api")
    expected = projection_snapshot(project)
    other = Project.objects.create(team=project.team, slug="other")
    rng = random.Random(seed)
    rng.shuffle(events)
    for i in range(0, len(events), 7):
        ingest_events(other, events[i : i + 7], source="api")
    assert projection_snapshot(other) == expected


@pytest.mark.skipif(
    connection.vendor != "postgresql", reason="SQLite serialises writers; row locks need PostgreSQL"
)
@pytest.mark.postgres
def test_it_is_safe_under_two_concurrent_writers(transactional_db: None, project: Project) -> None:
    events = our_run("pool-3", turns=6, steps=3)
    reference = Project.objects.create(team=project.team, slug="reference")
    ingest_events(reference, events, source="api")
    rng = random.Random(3)
    shuffled = events[:]
    rng.shuffle(shuffled)
    halves = [shuffled[0::2], shuffled[1::2]]

    def writer(part: list[dict]) -> None:
        for i in range(0, len(part), 5):
            ingest_events(project, part[i : i + 5] + part[max(0, i - 2) : i], source="api")

    assert _concurrently(writer, halves) == []
    assert Run.objects.get(project=project).events == len(events)
    ours = projection_snapshot(project)
    theirs = projection_snapshot(reference)
    assert ours["pool-3"] == theirs["pool-3"]


@pytest.mark.skipif(
    connection.vendor != "postgresql", reason="SQLite serialises writers; row locks need PostgreSQL"
)
@pytest.mark.postgres
def test_two_concurrent_writers_of_large_overlapping_batches_store_each_event_once(
    transactional_db: None, project: Project
) -> None:
    """Batches over the live size, each writer sending the whole run in its own order: most batches
    meet events the other writer stored a moment before (written after a savepoint, refused by the
    unique index, written again without them)."""
    events = our_run("pool-big", turns=12, steps=3)
    reference = Project.objects.create(team=project.team, slug="reference-big")
    ingest_events(reference, events, source="api")
    orders = [events[:], events[:]]
    random.Random(5).shuffle(orders[1])
    accepted: list[int] = []

    def writer(part: list[dict]) -> None:
        for i in range(0, len(part), 70):
            accepted.append(ingest_events(project, part[i : i + 70], source="api").accepted)

    assert _concurrently(writer, orders) == []
    assert sum(accepted) == len(events)  # each event accepted once, a duplicate the other time
    assert Run.objects.get(project=project).events == len(events)
    assert projection_snapshot(project)["pool-big"] == projection_snapshot(reference)["pool-big"]


def _concurrently(writer: Callable[[list[dict]], None], parts: list[list[dict]]) -> list[BaseException]:
    """Run `writer` on each part in a thread of its own, all starting together (each with its own
    database connection, closed after); returns what they raised."""
    barrier = threading.Barrier(len(parts))
    errors: list[BaseException] = []

    def run(part: list[dict]) -> None:
        try:
            barrier.wait()
            writer(part)
        except BaseException as exc:  # noqa: BLE001  (returned to the test)
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(p,)) for p in parts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors
