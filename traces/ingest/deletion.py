"""Deleting trace rows: one run (raw events and projections) or every run of a project.

Part of the one writer (DESIGN.md §3): pages, the API and the retention task delete through here.
Callers write the audit row (`traces.teams.actions`), in the same transaction.
"""

from __future__ import annotations

from django.db import transaction

from traces.dashboard import rollups
from traces.models import (
    ContextDecision,
    Event,
    InstructionCheck,
    Pin,
    PrimitiveEvent,
    Project,
    Run,
    Step,
    Turn,
)

# Children before parents. `_raw_delete` is one DELETE per table without Django's collector (which
# would load every primary key first); safe because nothing else points at these rows and they have no
# signals. Rows that do point at a run (share links, notes) go with the run row through the collector.
_PROJECTIONS = (ContextDecision, PrimitiveEvent, Pin, Step, Turn)


def do_delete_run(run: Run) -> None:
    """Delete `run`: its raw events, its projections and the run row. Takes the run's row lock first,
    like ingestion does, so a batch being written for the run finishes before or starts after."""
    with transaction.atomic():
        locked = Run.objects.select_for_update().filter(pk=run.pk).first()
        if locked is None:
            return  # deleted already (a double click, or retention and a person at once)
        events = Event.objects.filter(project_id=run.project_id, run_id=run.run_id)
        events._raw_delete(events.db)
        for model in _PROJECTIONS:
            qs = model.objects.filter(run_id=run.pk)
            qs._raw_delete(qs.db)
        # The model checks of its lost instructions quote its text (the instruction, the answer).
        InstructionCheck.objects.filter(project_id=run.project_id, run_id=run.run_id).delete()
        locked.delete()
        rollups.mark_runs(run.project_id, [locked])  # the dashboard's day of the run


def do_delete_runs_of_project(project: Project) -> None:
    """Delete every run of `project` with its raw events and projections (before deleting the project,
    whose cascade would otherwise walk every event row through the collector)."""
    with transaction.atomic():
        events = Event.objects.filter(project_id=project.pk)
        events._raw_delete(events.db)
        run_ids = Run.objects.filter(project=project).values("pk")
        for model in _PROJECTIONS:
            qs = model.objects.filter(run_id__in=run_ids)
            qs._raw_delete(qs.db)
        Run.objects.filter(project=project).delete()
