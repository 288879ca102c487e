"""A run with dropped messages, stored in a project: the re-run tests' original."""

from __future__ import annotations

from tests.runtime.test_rerun import BUDGET, truncated_run
from traces.ingest import ingest_events
from traces.models import Project, Run

__all__ = ["BUDGET", "truncated", "truncated_run"]


def truncated(project: Project) -> Run:
    """A chat of three turns whose last step received only its last message (aggressive truncation
    dropped the rest): turn 3 step 1 has messages 0 (system) to 5 (the question), 1-4 dropped."""
    events = truncated_run()
    ingest_events(project, events, source="api")
    return Run.objects.get(project=project, run_id=events[0]["run_id"])
