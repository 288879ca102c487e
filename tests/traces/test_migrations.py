"""Migrations with data: 0004 (message decisions move from a JSON array of objects to the packed
columnar text, and back, without losing a value) and 0019 (the stored steps with estimated token counts
marked)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from traces.models import Run, unpack_message_decisions

BEFORE = [("traces", "0003_step_tool_results")]
AFTER = [("traces", "0004_message_table")]
DECISIONS = [
    {"index": 0, "role": "system", "outcome": "kept", "fidelity": "L0", "relevance_score": None,
     "token_count_before": 12, "token_count_after": 12, "reason": "pinned", "pinned": True, "pin_id": "p_1"},
    {"index": 1, "role": "user", "outcome": "compressed", "fidelity": "L2", "relevance_score": 0.25,
     "token_count_before": 400, "token_count_after": 80, "reason": "tail\\ \"quoted\"\n", "pinned": False,
     "pin_id": None},
]  # fmt: skip


def _migrate(targets: list[tuple[str, str]]) -> Any:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


@pytest.fixture
def back_to_latest() -> Any:
    """The tests after this one need every migration: end at the graph's leaves, not at AFTER."""
    yield
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())


@pytest.mark.django_db(transaction=True)
def test_it_converts_stored_message_decisions_both_ways(back_to_latest: None) -> None:
    apps = _migrate(BEFORE)
    team = apps.get_model("traces", "Team").objects.create(name="m")
    project = apps.get_model("traces", "Project").objects.create(team=team, slug="m")
    run = apps.get_model("traces", "Run").objects.create(project=project, run_id="r")
    turn = apps.get_model("traces", "Turn").objects.create(run=run, number=1)
    step = apps.get_model("traces", "Step").objects.create(run=run, turn=turn, turn_number=1, number=1)
    decision_model = apps.get_model("traces", "ContextDecision")
    decision_model.objects.create(
        run=run, step=step, turn_number=1, step_number=1, message_decisions=DECISIONS
    )

    apps = _migrate(AFTER)
    table = apps.get_model("traces", "ContextDecision").objects.get().message_table
    assert table.startswith('{"cols":["index","role"')
    assert unpack_message_decisions(table) == DECISIONS

    apps = _migrate(BEFORE)
    assert apps.get_model("traces", "ContextDecision").objects.get().message_decisions == DECISIONS
    _migrate(AFTER)


@pytest.mark.django_db(transaction=True)
def test_0019_marks_the_stored_steps_whose_token_counts_are_estimates(back_to_latest: None) -> None:
    """Migration 0019 adds `ContextDecision.counts_estimated` (the projection writes it) and fills it for
    the rows stored before, from their reports: `Run.tokens_estimated` reads only the column."""
    apps = _migrate([("traces", "0018_projection_references_unconstrained")])
    team = apps.get_model("traces", "Team").objects.create(name="m19")
    project = apps.get_model("traces", "Project").objects.create(team=team, slug="m19")
    run_model, turn_model, step_model, decision_model = (
        apps.get_model("traces", m) for m in ("Run", "Turn", "Step", "ContextDecision")
    )
    reports = {
        "calibrated": {"token_counts": {"estimated": True, "calibration": 1.12}},
        "exact": {"token_counts": {"estimated": False}},
        "no-report": None,
        "truthy-string": {"token_counts": {"estimated": "true"}},  # not the boolean: not an estimate
    }
    for run_id, report in reports.items():
        run = run_model.objects.create(project=project, run_id=run_id)
        turn = turn_model.objects.create(run=run, number=1)
        step = step_model.objects.create(run=run, turn=turn, turn_number=1, number=1)
        decision_model.objects.create(run=run, step=step, turn_number=1, step_number=1, report=report)

    apps = _migrate([("traces", "0019_decision_indexes_for_pages")])
    marked = dict(
        apps.get_model("traces", "ContextDecision").objects.values_list("run__run_id", "counts_estimated")
    )
    assert marked == {"calibrated": True, "exact": False, "no-report": False, "truthy-string": False}

    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())  # the models' own schema, for `Run`
    runs = Run.objects.filter(project__slug="m19")
    assert {r.run_id: r.tokens_estimated for r in runs} == {
        "calibrated": True,
        "exact": False,
        "no-report": False,
        "truthy-string": False,
    }
