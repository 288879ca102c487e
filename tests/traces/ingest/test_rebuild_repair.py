"""`rebuild_projections` never stops on one bad row or run (issue 10 item 7): rows stored by an older
version (before events were checked) are reported and left out, the other runs are rebuilt."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client

from tests.traces.bad_input_cases import good
from tests.traces.ingest.test_bad_input import assert_everything_answers
from traces.ingest import do_delete_run, do_rebuild_projections, ingest_events
from traces.models import Event, Project, Run, Step, Turn


def _store(project: Project, *run_ids: str) -> None:
    events = [good(rid, n) for rid in run_ids for n in (1, 2)]
    assert ingest_events(project, events, source="cli").accepted == len(events)


def test_it_reports_bad_rows_and_runs_and_rebuilds_the_others(project: Project, alice_client: Client) -> None:
    _store(project, "fine", "late-row", "not-json-row", "all-bad")
    # As an older version could have stored them: a raw event whose time is past year 9999 in UTC,
    # a raw row that is not JSON, and a run whose every row is bad.
    late = {**good("late-row", 2), "timestamp": "9999-12-31T23:30:00-01:00"}
    Event.objects.filter(run_id="late-row", step_id="late-row-llm").update(raw=json.dumps(late))
    Event.objects.filter(run_id="not-json-row", step_id="not-json-row-turn").update(raw="{")
    Event.objects.filter(run_id="all-bad").update(raw='{"run_id": "all/bad"}')
    if connection.vendor == "postgresql":
        # A run date Python cannot read (PostgreSQL holds years past 9999): the rebuild must not need it.
        with connection.cursor() as cursor:
            cursor.execute("UPDATE traces_run SET ended_at = '10000-01-01 00:00:00+00' WHERE run_id = 'fine'")

    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(CommandError, match=r"^5 problems \(above\)"):
        call_command("rebuild_projections", stdout=out, stderr=err)
    assert out.getvalue().strip() == "Rebuilt 4 runs."
    problems = err.getvalue().splitlines()
    assert len(problems) == 5
    (late,) = [p for p in problems if "'late-row'" in p]
    assert "left out: 'timestamp'" in late and "outside the range" in late
    (not_json,) = [p for p in problems if "'not-json-row'" in p]
    assert "not readable JSON" in not_json
    assert sum("'all-bad'" in p for p in problems) == 3  # its two rows, then "no valid event left"

    runs = {r.run_id: r for r in Run.objects.filter(project=project)}
    assert (runs["fine"].events, runs["fine"].turns, runs["fine"].ended_at.year) == (2, 1, 2026)
    assert (runs["late-row"].events, runs["late-row"].turns) == (1, 1)
    assert runs["not-json-row"].events == 1
    assert runs["all-bad"].turn_set.count() == 0
    assert_everything_answers(alice_client, project, ["fine", "late-row", "all-bad"])


def test_the_function_collects_problems_and_counts_the_runs_rebuilt(project: Project) -> None:
    _store(project, "a", "b")
    Event.objects.filter(run_id="a", step_id="a-turn").update(raw="[1, 2")
    problems: list[str] = []
    assert do_rebuild_projections(project=project, problems=problems) == 2
    assert len(problems) == 1 and problems[0].startswith("run 'a' of project ")
    assert do_rebuild_projections(project=project, run_id="b") == 1  # no list given: logged only


def test_a_broken_run_can_be_deleted_and_sent_again(project: Project, alice_client: Client) -> None:
    _store(project, "broken", "kept")
    Event.objects.filter(run_id="broken").update(raw="{")  # beyond repair
    run = Run.objects.get(project=project, run_id="broken")
    do_delete_run(run)
    assert not Run.objects.filter(project=project, run_id="broken").exists()
    assert not Event.objects.filter(project=project, run_id="broken").exists()
    assert not Turn.objects.filter(run_id=run.pk).exists() and not Step.objects.filter(run_id=run.pk).exists()
    assert Event.objects.filter(project=project, run_id="kept").count() == 2
    # The same events sent again are new (not duplicates of deleted rows).
    again = ingest_events(project, [good("broken", 1), good("broken", 2)], source="api")
    assert again.accepted == 2
    assert Run.objects.get(project=project, run_id="broken").turns == 1
    assert_everything_answers(alice_client, project)
