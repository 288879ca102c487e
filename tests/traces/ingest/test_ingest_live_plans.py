"""A live batch's reads and deletes find their rows through an index range, whatever the table's
statistics say,
and its look-ups by parent and by step id give the rows of one whole batch in any split and order.

A live run's rows are newer than the statistics (PostgreSQL only re-analyzes a table after a tenth of
it changed), so the planner believes the run holds about one row; a query it can serve from any index
on (project, run_id) was planned as a scan of the whole run, filtered — a batch's cost then grew with
the run. Here: statistics taken before the run exists, a run streamed in small batches (steps split
across batches, so the parent look-ups run too), and every read of the last batch run again under
`EXPLAIN ANALYZE`: no plan node throws away more rows than a batch holds. The same for the delete of
the touched turns' projection rows (run again and rolled back)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.traces.helpers import our_run, projection_snapshot
from tests.traces.ingest.test_ingest_incremental import _foreign_parent
from tests.traces.views_helpers import envelope
from traces import ingest
from traces.models import Pin, Project, Run

postgresql_only = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="PostgreSQL's planner and statistics"
)


def _stream(run_id: str, steps: int) -> list[dict[str, Any]]:
    """Our events, in order: per step a turn, an llm_call and a tool_call naming it as parent; the turn
    event names the previous one (as the runtime writes them); two steps a turn."""
    t = datetime(2026, 11, 30, tzinfo=UTC)
    out: list[dict[str, Any]] = []
    prev = None
    for i in range(steps):
        md = {"producer": "arcana-console", "turn": i // 2 + 1, "step": i % 2 + 1}
        t += timedelta(milliseconds=3)
        turn = envelope(run_id, "turn", {**md, "facts": {"assistant_text": "ok", "tool_calls": []}},
                        parent_step_id=prev, timestamp=t.isoformat(), model="m")  # fmt: skip
        prev = turn["step_id"]
        out.append(turn)
        if i in (0, 2):  # pins in turns 1 and 2
            out.append(_pin(run_id, md, prev, t, i + 1))
        for kind in ("llm_call", "tool_call"):
            t += timedelta(milliseconds=1)
            out.append(envelope(run_id, kind, md, parent_step_id=prev, timestamp=t.isoformat()))
    return out


def _pin(run_id: str, md: dict[str, Any], parent: str, t: datetime, n: int) -> dict[str, Any]:
    pin_id = f"p_{n:08x}"
    return envelope(run_id, "cognitive_primitive", {**md, "primitive": "pin", "tool_call_id": f"pin-{n}",
                    "args": {"content": f"fact {n}", "label": f"l{n}"}, "tokens": 5,
                    "result": {"pinned": True, "pin_id": pin_id, "label": f"l{n}", "until_turn": None,
                               "already_pinned": False}},
                    parent_step_id=parent, timestamp=t.isoformat())  # fmt: skip


def _filtered(plan: dict[str, Any]) -> int:
    """The most rows any node of the plan read and threw away."""
    here = sum(
        int(plan.get(f"Rows Removed by {what}", 0)) for what in ("Filter", "Join Filter", "Index Recheck")
    )
    return max([here, *(_filtered(p) for p in plan.get("Plans", []))])


@postgresql_only
@pytest.mark.django_db
def test_a_live_batch_reads_no_more_than_it_touches(project: Project, turn_by_turn: list[bool]) -> None:
    other = _stream("earlier-run", 40)
    assert ingest.ingest_events(project, other, source="api").accepted == len(other)
    with connection.cursor() as cursor:
        for table in ("traces_event", "traces_step", "traces_turn", "traces_primitiveevent"):
            cursor.execute(f"ANALYZE {table}")  # statistics from before the live run
    events = _stream("live-run", 300)  # 902 events
    size = 7  # batches that split steps: a step's last events come after its turn event's batch
    batches = [events[i : i + size] for i in range(0, len(events), size)]
    # …and, last, an event of the last turn naming the turn event of the first step: a turn event of
    # another turn, looked up by its step id.
    md = {"producer": "arcana-console", "turn": 150, "step": 2}
    batches[-1].append(envelope("live-run", "llm_call", md, parent_step_id=events[0]["step_id"],
                                timestamp=events[-1]["timestamp"]))  # fmt: skip
    # …and a pin: the agent's pins are projected again, from its stored pin calls (looked up by step id).
    last_turn = next(e for e in reversed(events) if e["event_type"] == "turn")
    batches[-1].append(
        _pin("live-run", md, last_turn["step_id"], datetime.fromisoformat(events[-1]["timestamp"]), 9)
    )
    for batch in batches[:-1]:
        assert ingest.ingest_events(project, batch, source="api").accepted == len(batch)
    with CaptureQueriesContext(connection) as ctx:
        assert ingest.ingest_events(project, batches[-1], source="api").accepted == len(batches[-1])
    assert turn_by_turn[-1] is True  # the live path, not a whole-run projection
    assert Run.objects.get(run_id="live-run").events == len(events) + 2
    assert Pin.objects.filter(run__run_id="live-run").count() == 3
    reads = [q["sql"] for q in ctx.captured_queries if q["sql"].lstrip("( ").upper().startswith("SELECT")]
    # The parent look-ups ran: stored events naming a new turn event, a stored turn event named.
    assert any("parent_step_id =" in sql for sql in reads)
    assert any("step_id =" in sql.replace("parent_step_id =", "") for sql in reads)
    deletes = [q["sql"] for q in ctx.captured_queries if q["sql"].startswith("WITH d0 AS (DELETE")]
    assert len(deletes) == 1  # the touched turns' projection rows
    for sql in reads + deletes:
        plan = _explain(sql)
        assert _filtered(plan) <= 2 * size, (sql[:300], plan)


def _explain(sql: str) -> dict[str, Any]:
    """`EXPLAIN ANALYZE` of `sql` in a savepoint that is then rolled back (a delete is run for its plan)."""
    with connection.cursor() as cursor, transaction.atomic():
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql)
        (plan,) = cursor.fetchone()
        transaction.set_rollback(True)
    plan = json.loads(plan) if isinstance(plan, str) else plan
    return plan[0]["Plan"]


@postgresql_only
@pytest.mark.django_db
def test_a_large_batch_to_a_stored_run_reads_no_more_than_it_holds(project: Project) -> None:
    """A batch too large for the live path's insert (it asks which of its events are stored first) to a
    run with events, in a project whose events are newer than the statistics: every read of the batch
    finds its rows by key or range, not by filtering the project's or the run's events."""
    for n in range(3):  # the project's other runs: its events are most of the table
        other = _stream(f"earlier-run-{n}", 100)
        assert ingest.ingest_events(project, other, source="api").accepted == len(other)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE traces_event")  # statistics from before the project's live run
    events = _stream("big-batches", 90)  # 272 events
    first, second = events[:200], events[200:]  # 72 events, the first of them in a turn begun before
    assert len(second) > ingest.bulk.SMALL_BATCH_ROWS // 4  # not the live path's insert
    assert ingest.ingest_events(project, first, source="api").accepted == len(first)
    with CaptureQueriesContext(connection) as ctx:
        result = ingest.ingest_events(project, events[190:], source="api")  # ten re-sent
    assert (result.accepted, result.duplicates) == (len(second), 10)
    reads = [q["sql"] for q in ctx.captured_queries if q["sql"].lstrip("( ").upper().startswith("SELECT")]
    assert any("unnest(" in sql for sql in reads)  # the duplicate check ran
    for sql in reads:
        assert _filtered(_explain(sql)) <= len(events) - 190, sql[:300]


def _live_events() -> list[dict[str, Any]]:
    """A pool run in which one step's events name a turn event of another turn as parent."""
    events = our_run("live-parents", agents=("planner", "critic"), turns=3, steps=2)
    _foreign_parent(events)
    return events


@pytest.mark.django_db
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_split_and_order_of_a_live_run_gives_the_rows_of_one_batch(
    project: Project, data: st.DataObject
) -> None:
    """The look-ups by parent and by step id (stored events naming a new turn event; a turn event of
    another turn named by a batch's event) give the rows of one whole batch, whatever the order of the
    events and wherever the batches split."""
    events = _live_events()
    one = Project.objects.create(team=project.team, slug=f"one-{Project.objects.count()}")
    ingest.ingest_events(one, events, source="api")
    order = data.draw(st.permutations(range(len(events))) | st.just(list(range(len(events)))))
    cuts = sorted(data.draw(st.sets(st.integers(1, len(events) - 1), max_size=12)))
    streamed = Project.objects.create(team=project.team, slug=f"streamed-{Project.objects.count()}")
    for lo, hi in zip([0, *cuts], [*cuts, len(events)], strict=True):
        ingest.ingest_events(streamed, [events[i] for i in order[lo:hi]], source="api")
    assert projection_snapshot(streamed) == projection_snapshot(one)


def _most_read(plan: dict[str, Any], table: str) -> int:
    """The most rows any scan node of the plan read from `table`."""
    here = int(plan.get("Actual Rows", 0)) if plan.get("Relation Name") == table else 0
    return max([here, *(_most_read(p, table) for p in plan.get("Plans", []))])


@postgresql_only
@pytest.mark.django_db
@pytest.mark.parametrize("size", [20, 120], ids=["live batch", "large batch"])
def test_a_batch_writes_its_runs_counters_without_reading_the_other_runs(project: Project, size: int) -> None:
    """The UPDATE of a batch's runs finds them by primary key, however many runs the table holds (it
    was planned as a hash join over a scan of every run)."""
    md = {"producer": "arcana-console", "turn": 1, "step": 1}
    others = [envelope(f"other-{n}", "turn", md) for n in range(300)]
    assert ingest.ingest_events(project, others, source="api").accepted == 300
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE traces_run")
    events = _stream("counted", 120)
    assert ingest.ingest_events(project, events[:50], source="api").accepted == 50
    with CaptureQueriesContext(connection) as ctx:
        assert ingest.ingest_events(project, events[50 : 50 + size], source="api").accepted == size
    # The batch's statement that wrote the run's counters (with its rows, or with their ids) …
    ran = [q["sql"] for q in ctx.captured_queries if 'UPDATE "traces_run"' in q["sql"]]
    assert len(ran) == 1
    # … is this one, whose plan reads one run.
    run = Run.objects.get(project=project, run_id="counted")
    sql, params = ingest.bulk._update_runs_statement([run])
    assert sql.split(" FROM ")[0] in ran[0]
    with connection.cursor() as cursor, transaction.atomic():
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params)
        (plan,) = cursor.fetchone()
        transaction.set_rollback(True)
    plan = json.loads(plan) if isinstance(plan, str) else plan
    assert _most_read(plan[0]["Plan"], "traces_run") == 1
