"""Projection rows carry no foreign-key constraint (traces/models/projection.py): every way a run, a
project or a team is deleted still removes all of their projection rows, and a rebuild leaves none
behind."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection

from tests.traces.helpers import PIN_RUN
from traces.ingest import do_delete_run, do_rebuild_projections
from traces.models import ContextDecision, Pin, PrimitiveEvent, Project, Run, Step, Team, Turn
from traces.teams import actions as teams

_PROJECTIONS = (Turn, Step, ContextDecision, PrimitiveEvent, Pin)


def _counts(run_pks: list[int]) -> dict[str, int]:
    return {m.__name__: m.objects.filter(run_id__in=run_pks).count() for m in _PROJECTIONS}


def _orphans() -> dict[str, int]:
    """Projection rows whose run, turn or step no longer exists."""
    q = connection.ops.quote_name
    checks = {f"{m.__name__}.run": (m._meta.db_table, "run_id", Run._meta.db_table) for m in _PROJECTIONS}
    checks["Step.turn"] = (Step._meta.db_table, "turn_id", Turn._meta.db_table)
    checks["ContextDecision.step"] = (ContextDecision._meta.db_table, "step_id", Step._meta.db_table)
    checks["PrimitiveEvent.step"] = (PrimitiveEvent._meta.db_table, "step_id", Step._meta.db_table)
    out: dict[str, int] = {}
    with connection.cursor() as cursor:
        for name, (table, column, parent) in checks.items():
            cursor.execute(
                f"SELECT COUNT(*) FROM {q(table)} c WHERE c.{q(column)} IS NOT NULL AND NOT EXISTS "
                f"(SELECT 1 FROM {q(parent)} p WHERE p.{q('id')} = c.{q(column)})"  # noqa: S608
            )
            out[name] = cursor.fetchone()[0]
    return out


def _no_orphans() -> None:
    assert _orphans() == dict.fromkeys(_orphans(), 0)


@pytest.fixture
def pin_run(samples: Project) -> Run:
    run = Run.objects.get(project=samples, run_id=PIN_RUN)
    counts = _counts([run.pk])
    assert all(counts.values()), counts  # every kind of projection row
    return run


def test_deleting_a_run_leaves_no_projection_row(pin_run: Run, alice: Any) -> None:
    teams.do_delete_run(pin_run, alice)  # the API's and the run page's path
    assert _counts([pin_run.pk]) == dict.fromkeys(_counts([pin_run.pk]), 0)
    assert Run.objects.filter(project=pin_run.project).exists()  # the other runs stay
    _no_orphans()


def test_deleting_a_run_twice_or_through_the_orm_leaves_none(samples: Project, pin_run: Run) -> None:
    do_delete_run(pin_run)
    do_delete_run(pin_run)  # deleted already: nothing happens
    other = Run.objects.filter(project=samples).exclude(pk=pin_run.pk).first()
    assert other is not None and any(_counts([other.pk]).values())
    other.delete()  # the admin's way: Django's collector cascades
    assert not any(_counts([other.pk]).values())
    _no_orphans()


def test_deleting_the_project_or_the_team_leaves_none(samples: Project, alpha: Team, alice: Any) -> None:
    runs = list(Run.objects.filter(project=samples).values_list("pk", flat=True))
    assert any(_counts(runs).values())
    teams.do_delete_project(samples, alice)
    assert not any(_counts(runs).values())
    _no_orphans()


def test_deleting_a_team_leaves_none(samples: Project, alpha: Team) -> None:
    runs = list(Run.objects.filter(project=samples).values_list("pk", flat=True))
    teams.do_delete_team(alpha)
    assert not Run.objects.filter(pk__in=runs).exists()
    assert not any(_counts(runs).values())
    _no_orphans()


def test_deleting_a_project_through_the_orm_leaves_none(samples: Project) -> None:
    runs = list(Run.objects.filter(project=samples).values_list("pk", flat=True))
    samples.delete()  # the admin's way
    assert not any(_counts(runs).values())
    _no_orphans()


def test_a_rebuild_replaces_every_row_and_leaves_none_behind(samples: Project) -> None:
    runs = list(Run.objects.filter(project=samples).values_list("pk", flat=True))
    before = _counts(runs)
    do_rebuild_projections(project=samples)
    assert _counts(runs) == before
    _no_orphans()
