"""The one writer of trace rows (DESIGN.md §3): raw events first, then projections.

Every source — `POST /api/v1/ingest`, the `process_upload` task, `manage.py import_traces`, and the
worker's in-process sink — calls `ingest_events` (or `ingest_jsonl` for files, which calls it per chunk).
Everything other code uses is re-exported here: import from `traces.ingest`.

An event's path, top to bottom (`pipeline.ingest_events` and `pipeline.do_ingest` call the stages in
this order, and no stage calls another):

1. decode — `decoding` (a request body: `read_body`, `parse_batch`) or `jsonl` (a file: `iter_jsonl`),
   by the source before it calls `ingest_events`; the worker's sink hands decoded values over. An
   item that cannot be decoded is kept in its place, to be rejected with its position.
2. validate — `validation` (`check_events`): each item on its own, the Arcana envelope through
   `TraceEvent.from_dict` (the product's one parser; `TraceEvent.from_typed` when msgspec decoded a
   body and checked the envelope's types itself) and the rules of what can be stored. Unknown event
   types and metadata keys are legal and kept raw. A bad item is `rejected` with its index and
   reason; the others are still written.
3. store raw — `storing` (`prepare_raw`, `raw_written`), in the batch's one transaction: the runs the
   batch touches are created if missing and locked, in run_id order so two writers never deadlock;
   an event is keyed by `(project, run_id, step_id)`, and one already stored (or repeated earlier in
   the batch) is a `duplicate` and changes nothing; the new ones are written with one bulk insert
   (COPY on PostgreSQL).
4. project — `projecting` (`project_new_runs`, `project_runs`), same transaction: every run that
   gained events gets its projection rows and counters, recomputed from ALL its raw events in a
   canonical order (timestamp, then step_id) so they converge whatever the order and batching of
   arrival; a new run is projected from memory while PostgreSQL stores its raw events, a continued
   run of ours turn by turn (`incremental`, `counters`). Pure rows: `projection`.
5. count — `answer`: each item's fate (`accepted`, `duplicate`, `rejected`), counted.
6. answer — `answer`: the `IngestResult`, results in input order (`to_dict` is the API's body).

Helpers below the stages (none calls a stage): `events` (an event's own turn and order), `reads`
(queries of stored raw events), `bulk` (COPY and one-statement writes), `copytext` (COPY's text).
Beside the path: `rebuild` (`do_rebuild_projections`: stages 2 and 4 again over stored events, with
the same result), `deletion` (`do_delete_*`), `uploads` and `ratelimit` (the API's).

Verbs, as in zulip (STYLE.md item 6): `check_*` validate untrusted input and raise `TraceFormatError`
with a reason; `do_*` write and assume valid input. Should a batch fail for a reason of ours (not the
database being out), it is stored event by event, so only the event(s) to blame are lost.
"""

from traces.ingest.answer import IngestResult
from traces.ingest.bulk import fast_insert
from traces.ingest.decoding import BodyTooLarge, parse_batch, read_body
from traces.ingest.deletion import do_delete_run, do_delete_runs_of_project
from traces.ingest.events import local_turn
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
from traces.ingest.pipeline import collector_paused, do_ingest, ingest_events
from traces.ingest.projecting import do_write_projections
from traces.ingest.projection import message_decision, message_decisions, project_run
from traces.ingest.rebuild import do_rebuild_projections
from traces.ingest.validation import (
    CheckedEvent,
    EventResult,
    Source,
    Status,
    check_event,
    check_events,
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
