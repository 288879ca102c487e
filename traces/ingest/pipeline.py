"""`ingest_events`: the stages of ingest, in order, for one batch of decoded events.

See the package docstring for the stages and their modules; this module only runs them in order,
holds the batch's transaction, and keeps a bug of ours from losing a whole batch.
"""

from __future__ import annotations

import contextlib
import gc
import logging
from collections.abc import Iterator
from typing import Any

from django.db import InterfaceError, OperationalError, transaction

from traces.ingest.answer import IngestResult, answer
from traces.ingest.projecting import project_new_runs, project_runs
from traces.ingest.scoring import do_project_scores
from traces.ingest.storing import prepare_raw, raw_written
from traces.ingest.validation import CheckedEvent, EventResult, Source, Status, check_events
from traces.models import Project

log = logging.getLogger(__name__)


def ingest_events(
    project: Project,
    events: list[Any],
    *,
    source: Source,
    raw_texts: list[str | None] | None = None,
) -> IngestResult:
    """Validate and store a batch of events for `project`; see the package docstring for the contract.

    `events` are decoded already (stage 1, by the source: `decoding.parse_batch` for a request body,
    `jsonl.iter_jsonl` for a file, the worker's sink hands its values over). `raw_texts[i]`, when
    given, is the exact JSON text of `events[i]` (JSONL callers pass the line, so the stored raw event
    is byte-for-byte what the producer wrote). Results are in input order.
    """
    with collector_paused():
        checked, refused = check_events(events, raw_texts=raw_texts)  # 2. validate
        rejected = {r.index: r for r in refused}
        statuses = _store_and_project(project, checked, rejected, source)  # 3. store raw, 4. project
        result = answer(len(events), checked, statuses, rejected)  # 5. count, 6. answer
        log.debug("ingest via %s: %s accepted, %s duplicates", source, result.accepted, result.duplicates)
        return result


def do_ingest(project: Project, checked: list[CheckedEvent]) -> dict[int, Status]:
    """Stages 3 and 4 for valid events, in one transaction: store them raw, then project every run that
    gained events, and the new score events into scores (`scoring`). Returns `accepted` /
    `duplicate` per input index."""
    with transaction.atomic():
        batch = prepare_raw(project, checked)  # 3. store raw: the runs locked, the stored events told apart
        with raw_written(batch):  # the new events written; PostgreSQL stores them while…
            early = project_new_runs(batch)  # 4. project: …the new runs are projected, from memory
        project_runs(project, batch, early)  # every run that gained events: its rows and counters
        do_project_scores(project, (ev for events in batch.fresh.values() for ev in events))
    return batch.statuses


def _store_and_project(
    project: Project, checked: list[CheckedEvent], rejected: dict[int, EventResult], source: Source
) -> dict[int, Status]:
    """`do_ingest` of the batch. Should it fail for a reason other than the database being out
    (validation let through something the database or the projection cannot take: a bug of ours),
    the batch is stored event by event, so only the event(s) to blame are lost: each is added to
    `rejected` (`STORE_FAILED`), and logged."""
    if not checked:
        return {}
    try:
        return do_ingest(project, checked)
    except Exception as exc:
        if is_outage(exc):
            raise
        log.exception("ingest via %s: a batch of %s events failed; retrying one by one", source, len(checked))
    statuses: dict[int, Status] = {}
    for c in checked:
        try:
            statuses.update(do_ingest(project, [c]))
        except Exception as one_exc:
            if is_outage(one_exc):
                raise
            log.exception("ingest via %s: event %s could not be stored", source, c.index)
            rejected[c.index] = EventResult(c.index, "rejected", STORE_FAILED)
    return statuses


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Run the block with Python's cyclic garbage collector paused (objects are still freed by
    reference counting; the collector runs again after the block, over what is still alive).

    Why: a batch allocates hundreds of thousands of objects (decoded events, parsed events, rows),
    nearly all freed when the batch ends and none in a cycle; with the collector on, every 700
    allocations a collection walks the batch's live objects again, and survivors are walked again by
    the older generations. Paused when already paused elsewhere: left as it is."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


#: The message of an event that passed validation but could not be written (see `ingest_events`).
STORE_FAILED = (
    "the event passed validation but could not be stored (a server error, logged); please report it"
)


def is_outage(exc: BaseException) -> bool:
    """True for a failure of the database itself (down, connection lost), not of the data: retrying
    event by event would only reject good events, so the caller gets the error (a 5xx / a retry)."""
    if isinstance(exc, OperationalError | InterfaceError):
        return True
    try:
        import psycopg
    except ImportError:  # pragma: no cover - SQLite-only installs
        return False
    return isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError)
