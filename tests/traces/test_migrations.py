"""Migration 0004: message decisions move from a JSON array of objects to the packed columnar text,
and back, without losing a value."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from traces.models import unpack_message_decisions

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
