"""traces.ingest: every sample event accounted for, projections right, order-independent, idempotent."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from runtime._trace_reader import TraceReader
from tests.traces.helpers import PIN_RUN, SAMPLES, projection_snapshot, sample_events, sample_files
from tests.traces.views_helpers import arcana_tool_run
from traces.ingest import do_rebuild_projections, ingest_events, parse_batch
from traces.models import ContextDecision, Event, PrimitiveEvent, Project, Run, Step, Team, Turn


def test_it_ingests_every_sample_event(project: Project) -> None:
    events = sample_events()
    result = ingest_events(project, events, source="cli")
    assert result.rejected == 0 and result.duplicates == 0
    assert result.accepted == len(events) == Event.objects.filter(project=project).count()
    assert [r.status for r in result.results] == ["accepted"] * len(events)
    assert Run.objects.filter(project=project).count() == len(sample_files())
    for path in sample_files():
        run = Run.objects.get(project=project, run_id=path.stem)
        assert run.events == len(path.read_text().splitlines())
        assert run.source == Run.Source.ARCANA


def test_it_projects_the_pin_recall_run_like_the_reader(project: Project) -> None:
    ingest_events(project, sample_events(PIN_RUN[:8]), source="cli")
    run = Run.objects.get(run_id=PIN_RUN)
    reader = TraceReader(SAMPLES / "pin_recall")
    summary = reader.summary(PIN_RUN)
    assert (run.turns, run.steps, run.events, run.primitives) == (10, 10, 42, 9)
    assert (summary.turns, summary.steps, summary.events, summary.primitives) == (10, 10, 42, 9)
    assert (run.recall_count, run.pin_count, run.unpin_count) == (3, 4, 2)
    assert run.model == "mock-gpt" and run.status == Run.Status.COMPLETED
    assert list(Turn.objects.filter(run=run).values_list("number", flat=True)) == list(range(1, 11))
    # Decisions: one per step, with their message decisions.
    first = ContextDecision.objects.get(run=run, turn_number=1)
    assert first.strategy == "tail_preserve" and (first.messages_in, first.messages_out) == (9, 7)
    assert first.explanation == "No budget for summary, 2 messages dropped"
    assert len(first.message_decisions) == 9 and first.dropped_count == 2
    assert first.message_decisions[1]["outcome"] == "dropped"
    assert ContextDecision.objects.filter(run=run).count() == 10
    assert ContextDecision.objects.filter(run=run, pinned_count__gt=0).exists()
    # Pins and their lifetimes: the reader's view, at every turn.
    pins = {p.label: p for p in run.pins.all()}
    assert set(pins) == {"constraints", "customer"}
    for turn in range(1, 11):
        ours = sorted(p.pin_id for p in run.active_pins_at(turn))
        theirs = sorted(p.pin_id for p in reader.active_pins_at(PIN_RUN, turn))
        assert ours == theirs, turn
    customer = pins["customer"]
    active = [t for t in range(1, 11) if customer.is_active_at(t)]
    assert active == list(range(customer.created_turn, customer.unpinned_turn + 1))
    assert pins["constraints"].until_turn == 3
    # Primitive results, in the one wording the CLI prints too (runtime.facts.primitive_outcome).
    notes = list(
        PrimitiveEvent.objects.filter(run=run).order_by("timestamp").values_list("primitive", "ok", "note")
    )
    assert notes[0] == ("pin", True, "pin_id=p_76a38c7e label='constraints' until_turn=3")
    assert ("recall", True, "turn=2 → 2 messages") in notes
    assert ("recall", False, "turn=999 → turn out of range: 999, max=4") in notes
    assert ("unpin", False, "pin_id=p_00000000 unknown id") in notes
    assert ("pin", False, "REJECTED pin_budget_exceeded (40+4325 > 3500)") in notes
    assert all(p.step_id is not None for p in PrimitiveEvent.objects.filter(run=run))


def test_it_treats_a_replay_as_duplicates_that_change_nothing(project: Project) -> None:
    events = sample_events()
    ingest_events(project, events, source="api")
    before = projection_snapshot(project)
    again = ingest_events(project, events, source="api")
    assert again.accepted == 0 and again.duplicates == len(events)
    assert Event.objects.count() == len(events)
    assert projection_snapshot(project) == before


def test_it_counts_a_repeat_inside_one_batch_as_a_duplicate(project: Project) -> None:
    events = sample_events("08b465c7")
    result = ingest_events(project, [events[0], events[1], events[0]], source="api")
    assert [r.status for r in result.results] == ["accepted", "accepted", "duplicate"]


def _arcana_tool_events() -> list[dict[str, Any]]:
    return arcana_tool_run("arcana-tools", "Paris")


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_it_converges_whatever_the_order_and_batching(project: Project, seed: int) -> None:
    events = sample_events() + _arcana_tool_events()
    ingest_events(project, events, source="api")
    expected = projection_snapshot(project)
    other = Project.objects.create(team=project.team, slug=f"shuffled-{seed}")
    rng = random.Random(seed)
    shuffled = events[:]
    rng.shuffle(shuffled)
    i = 0
    while i < len(shuffled):
        n = rng.randint(1, 12)
        ingest_events(other, shuffled[i : i + n], source="api")
        i += n
    assert projection_snapshot(other) == expected


def test_it_rebuilds_identical_rows(project: Project) -> None:
    ingest_events(project, sample_events() + _arcana_tool_events(), source="api")
    before = projection_snapshot(project)
    assert any(s["tool_results"] for s in before["arcana-tools"]["steps"])
    Step.objects.filter(run__project=project).delete()
    assert do_rebuild_projections(project=project) == len(sample_files()) + 1
    assert projection_snapshot(project) == before


def test_it_keeps_unknown_event_types_and_metadata_raw(project: Project) -> None:
    ev: dict[str, Any] = dict(sample_events("08b465c7")[0])
    ev = {
        **ev,
        "step_id": "custom-1",
        "event_type": "galaxy_brain",
        "metadata": {"whatever": [1, 2]},
        "x_extra": 1,
    }
    result = ingest_events(project, [ev], source="api")
    assert result.accepted == 1
    stored = Event.objects.get(step_id="custom-1")
    assert stored.event_type == "galaxy_brain"
    assert stored.data["metadata"] == {"whatever": [1, 2]} and stored.data["x_extra"] == 1


def test_it_keeps_runs_of_different_projects_apart(project: Project, charlie_project: Project) -> None:
    events = sample_events("08b465c7")
    ingest_events(project, events[:1], source="api")
    result = ingest_events(charlie_project, events, source="api")
    assert result.accepted == 2  # not a duplicate of alice's copy
    mine = Run.objects.get(project=project, run_id=events[0]["run_id"])
    theirs = Run.objects.get(project=charlie_project, run_id=events[0]["run_id"])
    assert mine.pk != theirs.pk and mine.events == 1 and theirs.events == 2


def test_it_rejects_bad_items_and_keeps_the_good_ones(project: Project) -> None:
    good = sample_events("08b465c7")
    bad_type = {**good[0], "step_id": 42}
    missing = {k: v for k, v in good[0].items() if k != "run_id"}
    result = ingest_events(project, ["nope", good[0], bad_type, missing, [1], good[1]], source="api")
    assert [r.status for r in result.results] == [
        "rejected",
        "accepted",
        "rejected",
        "rejected",
        "rejected",
        "accepted",
    ]
    assert result.results[0].error == "event must be a JSON object, got string"
    assert result.results[2].error == "'step_id' must be a string, got number"
    assert result.results[3].error == "missing required field 'run_id'"
    assert Event.objects.count() == 2


def test_it_works_for_a_team_with_no_other_runs(db: None) -> None:
    team = Team.objects.create(name="T")
    project = Project.objects.create(team=team, slug="p")
    assert ingest_events(project, sample_events("64b15410"), source="cli").accepted == 1
    run = Run.objects.get(project=project)
    assert run.turns == 0 and run.events == 1


def test_it_completes_a_run_that_can_never_have_a_step(project: Project) -> None:
    # An Arcana 1.2 session file: history_seeded only (the sends go to files of their own).
    ingest_events(project, sample_events("64b15410"), source="cli")
    run = Run.objects.get(project=project)
    assert (run.status, run.steps) == (Run.Status.COMPLETED, 0)


def test_it_keeps_a_run_whose_first_step_is_in_flight_running(project: Project) -> None:
    from tests.traces.views_helpers import decision, our_step

    # Only the context decision of the first step has arrived: more is coming.
    decision_event, turn_event = our_step("in-flight", 1, 1, decisions=[decision(0, "user")])
    ingest_events(project, [decision_event], source="api")
    assert Run.objects.get(run_id="in-flight").status == Run.Status.RUNNING
    ingest_events(project, [turn_event], source="api")
    assert Run.objects.get(run_id="in-flight").status == Run.Status.COMPLETED


def test_it_parses_a_batch_body_keeping_each_events_exact_text() -> None:
    body = b'{ "events" : [ {"a": 1,  "b": "\\u00e9"} ,\n\t{"c": [1, 2]}, 3 ] }\n'
    payload, raws = parse_batch(body)
    assert payload == {"events": [{"a": 1, "b": "é"}, {"c": [1, 2]}, 3]}
    assert raws == ['{"a": 1,  "b": "\\u00e9"}', '{"c": [1, 2]}', "3"]
    assert parse_batch(b'{"events": []}') == ({"events": []}, [])
    # Other shapes fall back to json.loads (and its error messages).
    assert parse_batch(b'{"events": [1], "x": 2}') == ({"events": [1], "x": 2}, None)
    assert parse_batch(b"[1]") == ([1], None)
    assert parse_batch(b'\xef\xbb\xbf{"events": [1]}') == ({"events": [1]}, None)
    for bad in (b'{"events": [1,]}', b'{"events": [1]', b'{"events": [1]} x', b"\xff"):
        with pytest.raises(ValueError):
            parse_batch(bad)


def test_it_stores_the_exact_text_it_was_given(project: Project) -> None:
    ev = sample_events("08b465c7")[0]
    text = json.dumps(ev, indent=1)  # not the compact form json.dumps would give back
    result = ingest_events(project, [json.loads(text)], source="api", raw_texts=[text])
    assert result.accepted == 1
    assert Event.objects.get(step_id=ev["step_id"]).raw == text


def test_it_formats_raw_event_copy_rows_like_the_generic_formatter() -> None:
    from datetime import UTC, datetime

    from traces.ingest.copytext import copy_line, event_copy_text

    now = datetime.now(UTC)
    rows = [
        (1, "r\tx", "s", None, "turn", "", now, '{"a":"b\\n\\\\"}', now, None),
        (2, "r", "s2", "p\r", "x", "ag\n", now, "plain", now, 3),
    ]
    assert event_copy_text(rows) == "".join(copy_line(r) for r in rows)


def test_it_deletes_a_projects_events_and_projections_with_the_project(project: Project) -> None:
    """`Event.project` has no database constraint (ingest speed); Django's on_delete still cascades."""
    ingest_events(project, sample_events(PIN_RUN[:8]), source="cli")
    other = Project.objects.create(team=project.team, slug="other")
    ingest_events(other, sample_events(PIN_RUN[:8]), source="cli")
    project.delete()
    assert not Event.objects.filter(project_id=project.pk).exists()
    assert not Run.objects.filter(project_id=project.pk).exists()
    assert Event.objects.filter(project=other).count() == 42
    assert Step.objects.filter(run__project=other).count() == 10
