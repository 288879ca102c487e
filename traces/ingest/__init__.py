"""The one writer of trace rows (DESIGN.md §3): raw events first, then projections.

Every source — `POST /api/v1/ingest`, the `process_upload` task, `manage.py import_traces`, and the
worker's in-process sink — calls `ingest_events` (or `ingest_jsonl` for files, which calls it per chunk).

Verbs, as in zulip (STYLE.md item 6): `check_*` validate untrusted input and raise `TraceFormatError`
with a reason; `do_*` write and assume valid input.

Modules: `validation` (`check_*`, request bodies), `writing` (`ingest_events`, `do_*`), `projection`
(pure: a run's rows from its events), `incremental` (turn-by-turn projection), `bulk` (COPY),
`jsonl` (files). Everything other code uses is re-exported here: import from `traces.ingest`.

Contract of `ingest_events(project, events, source=...)`:

1. Each item is checked on its own (`check_event`): the Arcana envelope through `TraceEvent.from_dict`
   (the product's one parser; for a request body msgspec decodes, `TraceEvent.from_typed` when the
   decoder checked the envelope's types itself). Unknown event types and metadata keys are legal and kept raw. A bad item
   is `rejected` with its index and reason; the other items are still written.
2. Raw first and idempotent: an event is keyed by `(project, run_id, step_id)`. One already stored (or
   repeated earlier in the same batch) is a `duplicate` and changes nothing. On PostgreSQL the unique
   index decides: a live batch's insert skips stored rows (`ON CONFLICT DO NOTHING`), a larger batch
   to a run with events is written after a savepoint and, when the index refuses a row, rolled back
   to it and written again without the stored ones; elsewhere the stored ones are asked for first.
3. One transaction per batch. The runs the batch touches are created if missing and locked, in run_id
   order so two writers never deadlock (PostgreSQL: one `INSERT … ON CONFLICT DO UPDATE … RETURNING`;
   elsewhere `ON CONFLICT DO NOTHING` then `SELECT … FOR UPDATE`); then new raw events are written with
   one bulk insert (COPY on PostgreSQL).
4. Projections of every run that gained events are recomputed from ALL its raw events, in a canonical
   order (timestamp, then step_id), and replace the old ones. The projection is a pure function of the
   set of raw events, so it converges whatever the order and batching of arrival, and
   `do_rebuild_projections` gives identical rows. A run first seen in this batch skips the reads (its
   events are all in memory) and the deletes, and is projected while its raw events are written.
"""

from traces.ingest.bulk import _copy_line, _event_copy_text, fast_insert
from traces.ingest.deletion import do_delete_run, do_delete_runs_of_project
from traces.ingest.incremental import do_project_turns
from traces.ingest.jsonl import (
    MAX_LINE_ERRORS,
    JsonlResult,
    LineError,
    count_lines,
    ingest_jsonl,
    iter_chunks,
    iter_jsonl,
    max_line_bytes,
    open_jsonl,
)
from traces.ingest.projection import (
    local_turn,
    message_decision,
    message_decisions,
    project_run,
)
from traces.ingest.validation import (
    BodyTooLarge,
    CheckedEvent,
    EventResult,
    IngestResult,
    Source,
    Status,
    check_event,
    check_events,
    parse_batch,
    read_body,
)
from traces.ingest.writing import (
    collector_paused,
    do_ingest,
    do_rebuild_projections,
    do_write_projections,
    ingest_events,
)

__all__ = [
    "MAX_LINE_ERRORS",
    "BodyTooLarge",
    "CheckedEvent",
    "EventResult",
    "IngestResult",
    "JsonlResult",
    "LineError",
    "Source",
    "Status",
    "_copy_line",
    "_event_copy_text",
    "check_event",
    "check_events",
    "collector_paused",
    "count_lines",
    "do_delete_run",
    "do_delete_runs_of_project",
    "do_ingest",
    "do_project_turns",
    "do_rebuild_projections",
    "do_write_projections",
    "fast_insert",
    "ingest_events",
    "ingest_jsonl",
    "iter_chunks",
    "iter_jsonl",
    "local_turn",
    "max_line_bytes",
    "message_decision",
    "message_decisions",
    "open_jsonl",
    "parse_batch",
    "project_run",
    "read_body",
]
