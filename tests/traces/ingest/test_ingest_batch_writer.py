"""A batch's writer around the projection: the garbage collector paused for the batch and left as it
was found, the runs created and locked by one statement (new and stored runs together, in order), and a
new run projected while its raw events are written."""

from __future__ import annotations

import gc
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from django.db import connection

from tests.traces.helpers import our_run, projection_snapshot
from tests.traces.views_helpers import envelope
from traces.ingest import do_rebuild_projections, pipeline, projecting
from traces.ingest.bulk import SMALL_BATCH_ROWS
from traces.models import Event, Project, Run


def _events(run_id: str, n: int = 3) -> list[dict[str, Any]]:
    return [
        envelope(run_id, "turn", {"producer": "arcana-console", "turn": i + 1, "step": 1}) for i in range(n)
    ]


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_is_paused_for_the_batch_and_left_as_found(
    project: Project, monkeypatch: pytest.MonkeyPatch, enabled: bool
) -> None:
    seen: list[bool] = []
    check = pipeline.check_events

    def recording(*args: Any, **kwargs: Any) -> Any:
        seen.append(gc.isenabled())
        return check(*args, **kwargs)

    monkeypatch.setattr(pipeline, "check_events", recording)
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        result = pipeline.ingest_events(project, _events("r1"), source="api")
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()
    assert result.accepted == 3
    assert seen == [False]


def test_the_collector_comes_back_after_an_error() -> None:
    assert gc.isenabled()
    with pytest.raises(RuntimeError), pipeline.collector_paused():
        assert not gc.isenabled()
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_runs_are_created_with_their_defaults_and_stored_ones_kept(project: Project) -> None:
    b_events = _events("b-run", 4)
    pipeline.ingest_events(project, b_events[:3], source="api")
    stored = Run.objects.get(project=project, run_id="b-run")
    # One batch: a new run, the stored one again, and another new run (locked in run_id order).
    batch = _events("c-run") + b_events + _events("a-run")
    result = pipeline.ingest_events(project, batch, source="api")
    assert result.runs == ["a-run", "b-run", "c-run"]
    assert (result.accepted, result.duplicates) == (7, 3)
    runs = {r.run_id: r for r in Run.objects.filter(project=project)}
    assert runs["b-run"].pk == stored.pk and runs["b-run"].created_at == stored.created_at
    for rid in ("a-run", "c-run"):
        run = runs[rid]
        assert run.source == Run.Source.RUNTIME and run.events == 3 and run.turns == 3
        assert isinstance(run.agents, list) and run.created_at <= datetime.now(UTC)
        assert run.failure == "" and run.bundle_id == ""
    assert runs["b-run"].events == 4  # the 4th turn is new; the first three are duplicates


def test_a_new_runs_projection_is_made_while_its_raw_events_are_written(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On PostgreSQL the batch's COPY is still open (PostgreSQL storing the rows) while the new run is
    projected; the rows are those of a whole-run rebuild, and a stored run's batch goes on as before."""
    events = our_run("new-run", turns=4, steps=3)  # more events than a live batch: COPY
    assert len(events) > SMALL_BATCH_ROWS // 4
    states: list[Any] = []
    project_run = projecting.project_run

    def recording(evs: Any) -> Any:
        if connection.vendor == "postgresql":
            states.append(connection.connection.info.transaction_status)
        else:
            states.append(Event.objects.filter(project=project, run_id="new-run").count())
        return project_run(evs)

    monkeypatch.setattr(projecting, "project_run", recording)
    result = pipeline.ingest_events(project, events, source="api")
    assert result.accepted == len(events)
    if connection.vendor == "postgresql":
        assert states == [psycopg.pq.TransactionStatus.ACTIVE]  # inside the COPY
    else:
        assert states == [len(events)]
    assert Event.objects.filter(project=project, run_id="new-run").count() == len(events)
    ingested = projection_snapshot(project)
    do_rebuild_projections(project=project)
    assert projection_snapshot(project) == ingested


def test_an_error_while_the_raw_events_are_written_stores_nothing_of_the_batch(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = our_run("bad-run", turns=4, steps=3)

    def failing(evs: Any) -> Any:
        raise RuntimeError("a bug of ours")

    monkeypatch.setattr(projecting, "project_run", failing)
    result = pipeline.ingest_events(project, events, source="api")
    assert result.rejected == len(events) and result.accepted == 0
    assert not Event.objects.filter(project=project).exists()
    assert not Run.objects.filter(project=project).exists()
    monkeypatch.undo()
    # The connection is usable and the same batch goes in whole.
    assert pipeline.ingest_events(project, events, source="api").accepted == len(events)


def test_a_new_runs_batch_is_four_statements_besides_its_copy(project: Project) -> None:
    """PostgreSQL: the run created and locked, then its counters written in the statement that takes
    the new rows' ids, then the projection rows (one INSERT for a batch this small), then the day it
    touched marked for the dashboard's rollup; the raw events go by COPY (not captured here)."""
    from django.test.utils import CaptureQueriesContext

    events = our_run("new-run", turns=4, steps=3)
    with CaptureQueriesContext(connection) as ctx:
        result = pipeline.ingest_events(project, events, source="api")
    assert result.accepted == len(events)
    sql = [q["sql"] for q in ctx.captured_queries if "SAVEPOINT" not in q["sql"]]
    if connection.vendor == "postgresql":
        assert len(sql) == 4, sql
        assert sql[0].startswith('INSERT INTO "traces_run"')
        assert sql[1].startswith('WITH u AS (UPDATE "traces_run"') and "nextval" in sql[1]
        assert 'INSERT INTO "traces_step"' in sql[2]
        assert 'INSERT INTO "traces_rollupday"' in sql[3]
    run = Run.objects.get(project=project, run_id="new-run")
    assert (run.events, run.turns) == (len(events), 8)  # 4 turns of 2 agents
    ingested = projection_snapshot(project)
    do_rebuild_projections(project=project)
    assert projection_snapshot(project) == ingested


def test_a_large_batchs_turn_rows_go_with_their_ids_not_in_a_copy(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL: a batch over the live size writes its turn rows in the statement that takes the new
    turn and step ids (each turn its id, in order), and COPYs only the other tables; the rows are those
    of a rebuild from the raw events."""
    from django.test.utils import CaptureQueriesContext

    from traces.ingest import bulk

    copied: list[str] = []
    send = bulk._CopyChain.send

    def recording(self: Any, model: Any, rows: Any, ids: Any = None) -> None:
        copied.append(model.__name__)
        send(self, model, rows, ids)

    monkeypatch.setattr(bulk._CopyChain, "send", recording)
    events = our_run("big-a", turns=20, steps=3) + our_run("big-b", turns=15, steps=2)
    assert len(events) > SMALL_BATCH_ROWS
    with CaptureQueriesContext(connection) as ctx:
        result = pipeline.ingest_events(project, events, source="api")
    assert result.accepted == len(events)
    if connection.vendor == "postgresql":
        ids_sql = [q["sql"] for q in ctx.captured_queries if "nextval" in q["sql"]]
        assert len(ids_sql) == 1 and 'INSERT INTO "traces_turn"' in ids_sql[0]
        assert "Turn" not in copied and "Step" in copied
    runs = {r.run_id: r for r in Run.objects.filter(project=project)}
    assert (runs["big-a"].turns, runs["big-b"].turns) == (40, 30)  # turns of each of 2 agents
    ingested = projection_snapshot(project)
    do_rebuild_projections(project=project)
    assert projection_snapshot(project) == ingested


def test_a_large_batchs_turn_rows_keep_hostile_agent_names_exactly(project: Project) -> None:
    """The turn rows' JSON insert (a batch over the live size) stores quotes, backslashes, U+2028,
    astral characters and markup in agent names as sent, as a rebuild does."""
    from traces.models import Turn

    names = {'a"b\\c \u2028é😀<script>&amp;', 'x\\"y'}
    events = our_run("hostile", agents=tuple(sorted(names)), turns=30, steps=2)
    assert len(events) > SMALL_BATCH_ROWS
    result = pipeline.ingest_events(project, events, source="api")
    assert result.accepted == len(events)
    assert set(Turn.objects.filter(run__project=project).values_list("agent", flat=True)) == names
    ingested = projection_snapshot(project)
    do_rebuild_projections(project=project)
    assert projection_snapshot(project) == ingested
