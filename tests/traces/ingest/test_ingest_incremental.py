"""Turn-by-turn (incremental) projection: any order and batching give the rows of a one-batch ingest and
of `rebuild_projections`, including the cases it hands over to the whole-run projection."""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable
from typing import Any

import pytest

from tests.traces.helpers import our_run, projection_snapshot, sample_events
from tests.traces.views_helpers import OUR_RUN
from traces.ingest import do_rebuild_projections, ingest_events
from traces.models import Event, Pin, Project, Run, Step

Events = list[dict[str, Any]]


def _stream(project: Project, events: Events, rng: random.Random, *, shuffle: bool) -> None:
    items = events[:]
    if shuffle:
        rng.shuffle(items)
    i = 0
    while i < len(items):
        n = rng.randint(1, 9)
        # Now and then a batch repeats part of the previous one (a retrying sink): duplicates change nothing.
        repeat = items[max(0, i - 2) : i] if rng.random() < 0.2 else []
        ingest_events(project, items[i : i + n] + repeat, source="api")
        i += n


def assert_converges(project: Project, events: Events, *, seeds: range = range(1, 6)) -> None:
    """One-batch ingest == streamed in order == shuffled and streamed (several seeds) == rebuilt."""
    ingest_events(project, events, source="api")
    expected = projection_snapshot(project)
    for seed in seeds:
        for shuffle in (False, True):
            other = Project.objects.create(team=project.team, slug=f"s{seed}-{int(shuffle)}")
            _stream(other, events, random.Random(seed), shuffle=shuffle)
            assert projection_snapshot(other) == expected, (seed, shuffle)
            do_rebuild_projections(project=other)
            assert projection_snapshot(other) == expected, (seed, shuffle, "rebuilt")


def test_it_streams_our_runs_turn_by_turn_to_identical_rows(
    project: Project, turn_by_turn: list[bool]
) -> None:
    events = our_run("inc-1", agents=("planner", "critic", "scout"), turns=4, steps=3)
    assert_converges(project, events)
    assert turn_by_turn and all(turn_by_turn)  # every later batch went turn by turn
    assert Run.objects.get(project=project).incremental
    assert set(Event.objects.filter(project=project).values_list("turn", flat=True)) == {1, 2, 3, 4}


def test_it_takes_a_pins_tokens_from_a_later_working_set(project: Project, turn_by_turn: list[bool]) -> None:
    events = our_run("inc-2", turns=3, steps=2)
    for ev in events:
        ev["metadata"].pop("tokens", None)  # the pin results say no token count
    assert_converges(project, events)
    assert all(turn_by_turn)
    assert {p.tokens for p in Pin.objects.filter(run__project=project)} == {12}


def _mutated(fn: Callable[[Events], None]) -> Events:
    events = copy.deepcopy(our_run("inc-3", turns=3, steps=2))
    fn(events)
    return events


def _turn_id(events: Events, agent: str, turn: int, step: int) -> str:
    return next(
        e["step_id"]
        for e in events
        if e["event_type"] == "turn" and e["metadata"]["source_agent"] == agent
        and (e["metadata"]["turn"], e["metadata"]["step"]) == (turn, step)
    )  # fmt: skip


def _foreign_parent(events: Events) -> None:
    """Step planner 2.2 loses its turn event, and its events name planner 1.1's turn event as parent."""
    gone = _turn_id(events, "planner", 2, 2)
    other = _turn_id(events, "planner", 1, 1)
    events[:] = [e for e in events if e["step_id"] != gone]
    for e in events:
        if e["parent_step_id"] == gone:
            e["parent_step_id"] = other


def _model_tie(events: Events) -> None:
    for e in events:
        if e["metadata"]["source_agent"] == "critic" and e["model"]:
            e["model"] = "gpt-other"


def _error_stop(events: Events) -> None:
    events[len(events) // 2]["stop_reason"] = "error"


def _two_turn_events(events: Events) -> None:
    twin = copy.deepcopy(next(e for e in events if e["event_type"] == "turn"))
    twin["step_id"] += "-twin"
    twin["metadata"]["facts"]["assistant_text"] = "a second record of the same step"
    events.append(twin)


def _unstepped(events: Events) -> None:
    seeded = copy.deepcopy(events[0])
    seeded.update(step_id="seeded-1", event_type="history_seeded", parent_step_id=None)
    seeded["metadata"] = {"producer": "arcana-console", "messages": 3}
    events.append(seeded)


def _arcana_in_the_run(events: Events) -> None:
    for ev in sample_events("17a81a75")[:12]:
        events.append({**ev, "run_id": "inc-3"})


def _errors_and_failures(events: Events) -> None:
    last = max((e for e in events if e["event_type"] == "turn"), key=lambda e: (e["timestamp"], e["step_id"]))
    last["metadata"]["assessment"] = {"completed": False, "failed": True}
    err = copy.deepcopy(events[3])
    err.update(step_id="err-1", event_type="error", model=None)
    err["metadata"] = {**err["metadata"], "error": "timeout", "message": "provider timed out"}
    events.append(err)


@pytest.mark.parametrize(
    "mutate",
    [
        _foreign_parent,
        _model_tie,
        _error_stop,
        _two_turn_events,
        _unstepped,
        _arcana_in_the_run,
        _errors_and_failures,
    ],
)
def test_it_converges_in_the_cases_it_hands_over(project: Project, mutate: Callable[[Events], None]) -> None:
    assert_converges(project, _mutated(mutate), seeds=range(1, 4))


def test_it_fills_in_the_turn_of_events_stored_before_it_was_kept(project: Project) -> None:
    events = our_run("inc-4", turns=2, steps=1)
    ingest_events(project, events[:5], source="api")
    Event.objects.filter(project=project).update(turn=None)  # as rows written before migration 0002
    Run.objects.filter(project=project).update(incremental=False)
    ingest_events(project, events[5:], source="api")
    assert None not in set(Event.objects.filter(project=project).values_list("turn", flat=True))
    reference = Project.objects.create(team=project.team, slug="reference")
    ingest_events(reference, events, source="api")
    assert projection_snapshot(project) == projection_snapshot(reference)


def _ingest_in(project: Project, batches: list[Events]) -> dict[str, Any]:
    for batch in batches:
        ingest_events(project, batch, source="api")
    return projection_snapshot(project)


def test_it_reprojects_the_turn_whose_events_name_a_late_turn_event(project: Project) -> None:
    events = _mutated(_foreign_parent)
    late = _turn_id(events, "planner", 1, 1)
    expected = _ingest_in(project, [events])
    other = Project.objects.create(team=project.team, slug="late-parent")
    got = _ingest_in(
        other, [[e for e in events if e["step_id"] != late], [e for e in events if e["step_id"] == late]]
    )
    assert got == expected
    assert Run.objects.get(project=other).incremental


def test_it_handles_turn_events_after_their_children_and_unpins_before_pins(
    project: Project, turn_by_turn: list[bool]
) -> None:
    events = our_run("inc-5", turns=3, steps=2)
    expected = _ingest_in(project, [events])
    other = Project.objects.create(team=project.team, slug="children-first")
    unpins = [e for e in events if e["metadata"].get("primitive") == "unpin"]
    turns = [e for e in events if e["event_type"] == "turn"]
    rest = [e for e in events if e not in unpins and e not in turns]
    # Unpins first, then every step's other events, then its turn events one batch at a time.
    got = _ingest_in(other, [unpins, rest, *[[t] for t in reversed(turns)]])
    assert got == expected
    assert turn_by_turn and all(turn_by_turn)


def test_it_projects_tool_results_the_same_way_in_any_order(
    project: Project, turn_by_turn: list[bool]
) -> None:
    from tests.traces.views_helpers import OURS

    events = our_run("tools-1", agents=("planner",), turns=2, steps=2)
    # An unknown tool (our `error` event naming its call) and a failing tool next to the ones that worked.
    fixture = [json.loads(line) for line in (OURS / f"{OUR_RUN}.jsonl").read_text().splitlines()]
    assert_converges(project, events + fixture, seeds=range(1, 4))
    step = Step.objects.get(run__project=project, run__run_id="tools-1", turn_number=1, number=1)
    assert [(r["tool_call_id"], r["name"], r["result"], r["ok"]) for r in step.tool_results] == [
        ("call-1-1", "search", "ok", True)
    ]
    step = Step.objects.get(run__project=project, run__run_id=OUR_RUN, turn_number=2, number=1)
    assert [(r["name"], r["ok"], r["event"], r["error"]) for r in step.tool_results] == [
        ("weather", False, "error", "unknown_tool"),
        ("lookup_price", False, "tool_call", "price service unavailable"),
    ]
    assert turn_by_turn and any(turn_by_turn)


@pytest.mark.django_db
@pytest.mark.parametrize("cut", [0.3, 0.5, 0.7])
def test_a_continued_run_reads_back_none_of_the_batchs_own_events(
    project: Project, monkeypatch: pytest.MonkeyPatch, turn_by_turn: list[bool], cut: float
) -> None:
    """The stored events a batch's touched turns need are read before the batch's own are written:
    read after, the batch's events came back too (by turn and again by parent, raw text included),
    only to be skipped."""
    from traces.ingest import reads

    read: list[str] = []
    real = reads.touched_rows

    def recording(*args: Any) -> Any:
        rows = real(*args)
        read.extend(row[0] for row in rows)
        return rows

    monkeypatch.setattr(reads, "touched_rows", recording)
    events = our_run("continued", turns=4)
    first, second = events[: int(len(events) * cut)], events[int(len(events) * cut) :]
    assert ingest_events(project, first, source="api").accepted == len(first)
    read.clear()
    assert ingest_events(project, second, source="api").accepted == len(second)
    assert turn_by_turn[-1] is True  # the turn-by-turn path
    assert read, "the turn begun in the first batch: its stored events are read"
    assert not set(read) & {e["step_id"] for e in second}
    one = Project.objects.create(team=project.team, slug="one-batch")
    ingest_events(one, events, source="api")
    assert projection_snapshot(project) == projection_snapshot(one)


@pytest.mark.parametrize("size", [7, 13, 29])
def test_a_batch_continuing_one_run_and_starting_another_writes_their_rows_together(
    project: Project, monkeypatch: pytest.MonkeyPatch, turn_by_turn: list[bool], size: int
) -> None:
    """A batch cut across runs (a run continued, the next one begun, as bench/ingest.py's mix (a)
    posts them): the continued run's new rows and counters go with the new run's writes, and every
    run ends with the rows of a one-batch ingest."""
    from traces.ingest import projecting

    continued: list[int] = []
    real = projecting.do_write_projections

    def recording(*args: Any, **kwargs: Any) -> Any:
        continued.append(len(kwargs.get("continued", ())))
        return real(*args, **kwargs)

    monkeypatch.setattr(projecting, "do_write_projections", recording)
    events = [e for i in range(3) for e in our_run(f"cut-{i}", agents=("planner", "critic"), turns=3)]
    one = Project.objects.create(team=project.team, slug="one-batch")
    expected = _ingest_in(one, [events])
    continued.clear()
    got = _ingest_in(project, [events[i : i + size] for i in range(0, len(events), size)])
    assert got == expected
    assert any(continued), "some batch wrote a continued run with a new one"
    assert turn_by_turn and all(turn_by_turn)
    assert Run.objects.filter(project=project, incremental=True).count() == 3
    if size == 7:  # small batches across the runs, in order and shuffled, and rebuilt
        continued.clear()
        assert_converges(
            Project.objects.create(team=project.team, slug="streamed"), events, seeds=range(1, 3)
        )
        assert any(continued)
