"""A run page's first view reads what it shows, not the whole run. The fidelity map's window is read
from whichever end of the agent's steps is nearer (the same steps either way: hypothesis), and
`Run.tokens_estimated` is one probe of a partial index on `ContextDecision.counts_estimated` (which the
projection writes). Before, both read the whole run: an `OFFSET` past every earlier step, and a scan of
every step's report. Plans are checked on the database the suite runs on (SQLite's `EXPLAIN QUERY
PLAN`, PostgreSQL's `EXPLAIN ANALYZE`)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.db import connection
from django.db.models import QuerySet
from django.test.utils import CaptureQueriesContext
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.traces.helpers import our_run
from traces.ingest import ingest_events
from traces.models import ContextDecision, Project, Run
from traces.runs.charts.fidelity import _map_window

STEPS = 24  # one agent, 12 turns of 2 steps


@pytest.fixture
def long_run(project: Project) -> Run:
    events = our_run("long-run", agents=("solo",), turns=STEPS // 2, steps=2)
    assert ingest_events(project, events, source="api").rejected == 0
    return Run.objects.get(run_id="long-run")


@pytest.mark.django_db
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(start=st.none() | st.integers(-3, STEPS + 3), window=st.integers(1, STEPS + 20))
def test_the_map_window_holds_the_same_steps_read_from_either_end(
    long_run: Run, start: int | None, window: int
) -> None:
    everything = list(
        ContextDecision.objects.filter(run=long_run, agent="solo")
        .order_by("turn_number", "step_number")
        .values_list("turn_number", "step_number")
    )
    total, first, width, steps = _map_window(long_run, "solo", start, window)
    # The window's rule, applied to the whole list: at least 10 steps, at most 400, clamped to the run.
    expected_width = max(10, min(window, 400))
    expected_first = max(0, total - expected_width) if start is None else start
    expected_first = max(0, min(expected_first, max(0, total - expected_width)))
    assert (total, first, width) == (STEPS, expected_first, expected_width)
    assert [(t, s) for t, s, _strategy, _rows in steps] == everything[first : first + width]


def _plan(qs: QuerySet[Any]) -> str:
    sql, params = qs.query.sql_with_params()
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params)
            (plan,) = cursor.fetchone()
            return json.dumps(json.loads(plan) if isinstance(plan, str) else plan)
        cursor.execute("EXPLAIN QUERY PLAN " + sql, params)
        return " | ".join(str(row[-1]) for row in cursor.fetchall())


def _rows_read(plan: str) -> int:
    """PostgreSQL: the most rows any scan node of the plan produced or threw away."""

    def walk(node: dict[str, Any]) -> int:
        here = int(node.get("Actual Rows", 0)) + int(node.get("Rows Removed by Filter", 0))
        return max([here, *(walk(child) for child in node.get("Plans", []))])

    return walk(json.loads(plan)[0]["Plan"])


@pytest.mark.django_db
def test_the_last_window_and_the_estimate_check_read_only_their_rows(long_run: Run) -> None:
    with CaptureQueriesContext(connection) as ctx:
        _map_window(long_run, "solo", None, 10)  # the last window, as the page asks it
    window_ids = [q["sql"] for q in ctx.captured_queries if "DESC" in q["sql"]]
    assert len(window_ids) == 1 and "OFFSET" not in window_ids[0], ctx.captured_queries
    decisions = ContextDecision.objects.filter(run=long_run, agent="solo")
    last = decisions.order_by("-turn_number", "-step_number").values_list("id", flat=True)[:5]
    # `Run.tokens_estimated`'s query (`exists()`: no ordering, one row).
    estimated = long_run.decisions.filter(counts_estimated=True).order_by().values("pk")[:1]
    assert not estimated and long_run.tokens_estimated is False
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL enable_seqscan = off")  # a tiny table: as a large one is planned
        last_plan, estimated_plan = _plan(last), _plan(estimated)
        assert "decision_run_turn_idx" in last_plan and '"Sort"' not in last_plan, last_plan
        assert _rows_read(last_plan) <= 5, last_plan
        assert "decision_estimated_idx" in estimated_plan, estimated_plan
        assert _rows_read(estimated_plan) == 0, estimated_plan
    else:
        last_plan, estimated_plan = _plan(last), _plan(estimated)
        assert "decision_run_turn_idx" in last_plan and "TEMP B-TREE" not in last_plan, last_plan
        assert "decision_estimated_idx" in estimated_plan, estimated_plan
