"""`do_rebuild_projections`: every projection recomputed from the stored raw events (`manage.py
rebuild_projections`, and repairs). Not a stage of `ingest_events`: it re-validates what is stored
(stage 2) and projects it whole (stage 4, `projecting.do_write_projections`), run by run.
"""

from __future__ import annotations

import json
import logging

from django.db import transaction

from runtime import TraceEvent
from runtime.errors import TraceFormatError
from traces.dashboard import rollups
from traces.ingest.pipeline import is_outage
from traces.ingest.projecting import delete_projections, do_write_projections
from traces.ingest.scoring import do_project_scores
from traces.ingest.validation import check_event, printable
from traces.models import Event, Project, Run

log = logging.getLogger(__name__)


def do_rebuild_projections(
    *, project: Project | None = None, run_id: str | None = None, problems: list[str] | None = None
) -> int:
    """Recompute projections of every run (of `project`, or the one `run_id`) from raw events.

    Gives the same rows as ingestion did. One transaction per run, with the run locked. Never stops on
    one bad row or run: a stored event that no longer passes `check_event` (stored by an older version,
    or edited in the database) is left out of its run's projection, and a run that still cannot be
    projected keeps its old rows; each is described in `problems` (when given) and logged, and the
    other runs go on. Returns the number of runs rebuilt."""
    qs = Run.objects.all()
    if project is not None:
        qs = qs.filter(project=project)
    if run_id is not None:
        qs = qs.filter(run_id=run_id)
    found: list[str] = [] if problems is None else problems
    count = 0
    touched: set[int] = set()
    for pk, pid, rid in qs.order_by("pk").values_list("pk", "project_id", "run_id"):
        touched.add(pid)
        label = f"run {rid!r} of project {pid}"
        try:
            with transaction.atomic():
                # The run's own dates are recomputed: cleared first, so a value Python cannot read
                # (stored before timestamps were checked) does not stop the rebuild.
                Run.objects.filter(pk=pk).update(started_at=None, ended_at=None)
                run = Run.objects.select_for_update().select_related("project").get(pk=pk)
                events = _load_checked_events(run, label, found)
                if events:
                    do_write_projections([run], {run.pk: events}, replace=[run.pk])
                    do_project_scores(run.project, events)  # the ones not written yet (by client id)
                else:
                    found.append(f"{label}: no valid event left; its projections are empty")
                    delete_projections([run.pk])
        except Exception as exc:
            if is_outage(exc):
                raise
            log.exception("rebuild_projections: %s failed", label)
            found.append(f"{label}: not rebuilt ({type(exc).__name__}: {printable(str(exc), 300)})")
            continue
        count += 1
    for pid in sorted(touched):  # the dashboard: every day of these projects needs a new rollup
        rollups.mark_project(pid)
    return count


def _load_checked_events(run: Run, label: str, problems: list[str]) -> list[TraceEvent]:
    """Every stored event of `run` that passes `check_event` today; the others are reported."""
    out: list[TraceEvent] = []
    rows = Event.objects.filter(project_id=run.project_id, run_id=run.run_id).values_list(
        "pk", "step_id", "raw"
    )
    for pk, sid, raw in rows.iterator(chunk_size=2000):
        try:
            out.append(check_event(json.loads(raw)))
        except TraceFormatError as exc:
            problems.append(f"{label}: event {pk} ({printable(sid, 60)}) left out: {exc.reason}")
        except (ValueError, RecursionError) as exc:
            problems.append(f"{label}: event {pk} ({printable(sid, 60)}) left out: not readable JSON ({exc})")
    return out
