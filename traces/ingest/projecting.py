"""Stage 4, project: every run that gained events gets its projection rows and counters.

- a new run (no events before this batch) is projected whole from the batch's events, all in memory
  (`project_new_runs`, run while PostgreSQL stores the raw events: `storing.raw_written`'s block);
- a continued run whose events all have their own turn (`Run.incremental`, `events.is_local_batch`)
  is projected turn by turn: only the turns the batch touches (`incremental.do_project_turns`, with
  its counters from `counters`);
- any other continued run, or one the turn-by-turn path hands back, is projected whole again from
  ALL its stored events (`reads.load_events`), in a canonical order (timestamp, then step_id), and
  its old rows replaced.

The projection is a pure function of the set of raw events (`projection.project_run`), so it converges
whatever the order and batching of arrival, and `rebuild.do_rebuild_projections` gives identical rows.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.utils import timezone

from runtime import TraceEvent
from traces.dashboard import rollups
from traces.ingest.bulk import insert_projections
from traces.ingest.counters import whole_run_tally
from traces.ingest.events import is_local_batch
from traces.ingest.incremental import do_project_turns
from traces.ingest.projection import Projection, project_run
from traces.ingest.reads import load_events
from traces.ingest.storing import RawBatch
from traces.models import ContextDecision, Pin, PrimitiveEvent, Project, Run, Step, Turn


def project_new_runs(batch: RawBatch) -> dict[str, Projection]:
    """The projection of each run first seen in `batch`, by run_id: pure, from its events in memory
    (no stored row is needed, so it runs while the raw events are stored)."""
    return {run.run_id: project_run(batch.fresh[run.run_id]) for run in batch.new_runs()}


def project_runs(project: Project, batch: RawBatch, early: dict[str, Projection]) -> None:
    """Project every run of `batch` that gained events and write the rows and the runs' counters;
    see the module docstring. `early`: `project_new_runs(batch)`, computed while the raw events were
    stored (a new run whose events changed since, when storing found some stored already, is
    projected again). Must run inside the batch's transaction, holding its runs' locks."""
    changed = batch.changed()
    started_before = {run.pk: run.started_at for run in changed}  # the dashboard's days (below)
    full = [run for run in changed if run.events == 0]
    projected = [
        proj
        if (proj := early.get(run.run_id)) is not None
        and proj.run_fields["events"] == len(batch.fresh[run.run_id])
        else project_run(batch.fresh[run.run_id])
        for run in full
    ]
    reload: list[Run] = []
    # With new runs in the batch, a continued run's new rows are written with theirs.
    continued: list[tuple[Run, Projection]] | None = [] if full else None
    for run in changed:
        if run.events == 0:
            continue
        new = batch.fresh[run.run_id]
        if not (run.incremental and is_local_batch(new)):
            reload.append(run)
        elif not do_project_turns(
            project, run, new, stored=batch.stored_before.get(run.run_id), deferred=continued
        ):
            reload.append(run)  # a case the turn-by-turn path does not cover: project it whole
    events_of = load_events(project, reload)
    events_of.update((run.pk, batch.fresh[run.run_id]) for run in full)  # a new run's: all in the batch
    if full or reload:
        do_write_projections(
            full + reload,
            events_of,
            replace=[run.pk for run in reload],
            projected=projected,
            tally=True,
            continued=continued or (),
        )
    # The dashboard: the days these runs started on (and started on before) need a new rollup.
    rollups.mark_runs(project.pk, changed, started_before)


def delete_projections(run_pks: list[int]) -> None:
    """Delete every projection row of these runs (not the run rows).

    Children first; `_raw_delete` is one DELETE per table with no collector round trips, which is
    safe because nothing else points at these rows and they have no signals."""
    for model in (ContextDecision, PrimitiveEvent, Pin, Step, Turn):
        qs = model.objects.filter(run_id__in=run_pks)
        qs._raw_delete(qs.db)


def do_write_projections(
    runs: list[Run],
    events_of: dict[int, list[TraceEvent]],
    *,
    replace: list[int],
    projected: Sequence[Projection] = (),
    tally: bool = False,
    continued: Sequence[tuple[Run, Projection]] = (),
) -> None:
    """Replace the projection rows of `runs` with ones computed from `events_of[run.pk]`.

    Must run inside a transaction holding the runs' row locks. `replace` names the runs that may have
    projection rows already (they are deleted first); the others are known to have none. `projected`,
    when given, holds the projections of the first runs (`project_run` of their events), computed
    already. `tally`: `events_of` holds every stored event of each run, so the runs' `tally` is written
    (`whole_run_tally`) for their next live batches. `continued`: runs projected turn by turn whose
    new rows and counters are written here too (`do_project_turns`'s `deferred`)."""
    if replace:
        delete_projections(replace)
    projections = [*projected, *(project_run(events_of[run.pk]) for run in runs[len(projected) :])]
    now = timezone.now()
    for run, proj in zip(runs, projections, strict=True):
        for key, value in proj.run_fields.items():
            setattr(run, key, value)
        run.updated_at = now
        if tally:
            run.tally = whole_run_tally(events_of[run.pk], proj, now)
    items = [*zip(runs, projections, strict=True), *continued]
    insert_projections(items, update=[run for run, _ in items])
