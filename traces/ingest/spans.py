"""OpenTelemetry spans into the one writer (DESIGN.md §10): raw spans first, then the runs they make.

`do_ingest_spans(project, spans)`:

1. **Raw first, idempotent.** Each decoded span (`runtime.otlp.Span`) is stored as a `Span` row keyed
   by `(project, trace_id, span_id)`; a span sent again is stored once (the first copy stays). The
   raw spans are committed before anything is derived from them: a stored span has `run_id` "" until
   its run is derived (pending).
2. **Now or on a worker.** A request of at most `ARCANA_OTLP_INLINE_SPANS` new spans derives their
   runs before it answers, unless another derivation of the project holds its span lock; a larger
   request, or one that would wait, leaves them to the `derive_spans` task
   (`traces.ingest.span_queue`), which derives every pending span of the project. The exporter's 200
   means "stored"; the pages follow within the worker's lag (a burst is absorbed at the raw store's
   speed, not the derivation's).
3. **The runs the batch touches, whole.** A run is a conversation (`gen_ai.conversation.id`, else
   `session.id`), else a trace (`runtime.otlp.group_runs`), so a span changes the run of every span
   of its trace and of every trace of its conversation: those spans are read back, and the run is
   assembled from all of them in any order of arrival (`runtime.otlp.assemble_run`).
4. **Derived events, through the one path.** In one transaction under the project's span lock (two
   batches of one conversation never interleave), each run's events (`runtime.otlp.events_for_run`;
   their step ids are made from span ids, so the same spans give the same events) replace the run's
   previous ones and projections, and `ingest_events` projects and counts them like any producer's:
   runs, turns, steps, tool calls, errors. Only the runs that gained or lost spans are derived, and
   a run whose new spans only append model calls keeps its stored events and gains the new steps'
   (`traces.ingest.span_append`: the same events and rows as deriving it whole). A late span — a child before its parent, an agent span after its children — only
   changes what the run is derived into, so the pages follow.
5. A trace first seen without its conversation id becomes a run of its own (keyed by the trace id);
   once a span of it names the conversation, that run is folded into the conversation's and deleted.

Conversation ids are scoped to their project: two projects reusing one id never share a run.
"""

from __future__ import annotations

import json
import logging
import zlib
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import msgspec
import psycopg
from django.conf import settings
from django.db import connection, transaction

from runtime.otlp import (
    NormalizedSpan,
    assemble_run,
    events_for_run,
    group_runs,
    normalize_span,
    run_id_for,
    run_key_of,
)
from runtime.otlp import Span as DecodedSpan
from traces.ingest import span_queue
from traces.ingest.deletion import do_delete_run
from traces.ingest.pipeline import ingest_events
from traces.ingest.projecting import delete_projections
from traces.ingest.span_append import (
    appended_steps,
    decisions_agree,
    event_text,
    events_of_steps,
    stored_decisions,
)
from traces.models import Event, Project, Run, Span

log = logging.getLogger(__name__)

#: How many rounds of "spans of these traces → their conversations → those conversations' traces"
#: a batch follows before it projects (a conversation id reached only through more hops than this is
#: picked up by the next batch that touches it).
_CLOSURE_ROUNDS = 3


@dataclass
class SpanResult:
    """What a batch of spans did: spans stored (new), spans already stored, runs (re)derived, and
    events the derived runs could not store (named, with their reason; the raw spans are kept)."""

    stored: int = 0
    duplicates: int = 0
    runs: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


class DerivationBusy(Exception):
    """Another derivation of the project holds its span lock (`do_derive_runs(wait=False)`)."""


_ENCODE = msgspec.json.Encoder()


def _body(span: DecodedSpan) -> bytes:
    """A span as stored: its decoded form as compact JSON (msgspec; `json` for what msgspec cannot
    write). Not compressed here: zlib would cost more than the insert on the request's path; on
    PostgreSQL a body stays in its row as it is up to 8,160 bytes, and lz4 compresses longer ones."""
    try:
        return _ENCODE.encode(span)
    except (TypeError, OverflowError, msgspec.EncodeError):
        return json.dumps(span, ensure_ascii=False, separators=(",", ":")).encode()


_DECODE = msgspec.json.Decoder()


def stored_span(body: bytes) -> DecodedSpan:
    """A stored span read back: JSON, or zlib-compressed JSON (spans stored before bodies were plain).
    msgspec reads what it wrote; `json` what it cannot (an integer past 64 bits, written by `json`)."""
    if body[:1] != b"{":
        body = zlib.decompress(body)
    try:
        span: DecodedSpan = _DECODE.decode(body)
    except msgspec.DecodeError:
        span = json.loads(body)
    return span


def do_ingest_spans(project: Project, spans: list[DecodedSpan]) -> SpanResult:
    """Store `spans` (valid, decoded) for `project`, then derive the runs they touch now or leave them
    to a worker (module docstring, 3)."""
    result = SpanResult()
    if not spans:
        return result
    # A request that will be left to a worker is filed by its run keys alone; one derived here is
    # normalized once, now, and its normalized spans are handed to the derivation.
    inline = len({(s["trace_id"], s["span_id"]) for s in spans}) <= int(settings.ARCANA_OTLP_INLINE_SPANS)
    rows: dict[tuple[str, str], _Raw] = {}
    read: dict[tuple[str, str], tuple[bytes, NormalizedSpan]] = {}
    for s in spans:
        key = (s["trace_id"], s["span_id"])
        if key in rows:
            result.duplicates += 1
            continue
        normalized = normalize_span(s) if inline else None
        run_key, source = (
            run_key_of(s) if normalized is None else (normalized["run_key"], normalized["run_key_source"])
        )
        body = _body(s)
        conversation = "" if source == "trace_id" else run_id_for(run_key)
        rows[key] = _Raw(s["trace_id"], s["span_id"], conversation, body)
        if normalized is not None:
            read[key] = (body, normalized)
    new = _store_new(project, rows)
    result.stored = len(new)
    result.duplicates += len(rows) - len(new)
    if not new:
        return result  # every span was stored before: the runs are what they were
    if not inline:
        span_queue.enqueue_derivation(project.pk)
        return result
    traces = {row.trace_id for row in new}
    conversations = {row.conversation for row in new if row.conversation}
    try:
        do_derive_runs(project, traces, conversations, result, changed_only=True, read=read, wait=False)
    except DerivationBusy:
        span_queue.enqueue_derivation(project.pk)
    except Exception:
        span_queue.enqueue_derivation(project.pk)  # the raw spans are stored: a worker derives them
        raise
    return result


# The project row is locked (FOR KEY SHARE, what a foreign key's check takes, once instead of once
# a row) so it cannot be deleted before the spans commit; a project already deleted stores nothing.
_INSERT_SPANS = (
    f"WITH p AS (SELECT id FROM {Project._meta.db_table} WHERE id = %s FOR KEY SHARE) "
    f"INSERT INTO {Span._meta.db_table} (project_id, trace_id, span_id, conversation, run_id, received_at, body) "
    "SELECT p.id, t, s, c, '', now(), b FROM p, unnest(%s::text[], %s::text[], %s::text[], %b::bytea[]) AS v(t, s, c, b) "
    "ON CONFLICT (project_id, trace_id, span_id) DO NOTHING RETURNING trace_id, span_id"
)


class _Raw(NamedTuple):
    """A span's row before it is stored."""

    trace_id: str
    span_id: str
    conversation: str
    body: bytes


def _store_new(project: Project, rows: dict[tuple[str, str], _Raw]) -> list[_Raw]:
    """The rows inserted, the ones already stored (same trace and span id) skipped: on PostgreSQL one
    `INSERT … ON CONFLICT DO NOTHING RETURNING`, elsewhere a read of the stored keys and a bulk insert.
    Committed on return (the raw spans stand whether or not their runs are derived now)."""
    if not rows:
        return []
    if connection.vendor == "postgresql":
        values = list(rows.values())
        params = [
            project.pk,
            [r.trace_id for r in values],
            [r.span_id for r in values],
            [r.conversation for r in values],
            [r.body for r in values],
        ]
        with transaction.atomic():
            connection.ensure_connection()
            # psycopg's own cursor, the bodies sent as a binary parameter (`%b`): Django's cursor would
            # quote them into the statement's text (bytea escaped, then parsed back by PostgreSQL).
            with psycopg.Cursor(connection.connection) as cursor:
                cursor.execute(_INSERT_SPANS, params)
                return [rows[(t, s)] for t, s in cursor.fetchall()]
    with transaction.atomic():
        if not Project.objects.filter(pk=project.pk).exists():
            return []  # deleted meanwhile (SQLite writes one transaction at a time)
        stored = set(
            Span.objects.filter(project=project, trace_id__in={t for t, _ in rows}).values_list(
                "trace_id", "span_id"
            )
        )
        new = [row for key, row in rows.items() if key not in stored]
        Span.objects.bulk_create(
            [Span(project=project, **row._asdict()) for row in new], batch_size=500, ignore_conflicts=True
        )
    return new


def do_derive_pending(project: Project, *, chunk: int = 500) -> int:
    """Derive the runs of every pending span of `project` (stored, `run_id` ""), oldest first, `chunk`
    spans a round, each round its own transaction under the project's span lock (`do_derive_runs`).
    Returns the number of spans it found pending. Safe to run twice at once: the second waits for
    the lock and finds the runs derived (nothing gained)."""
    found = 0
    last: list[int] = []
    while True:
        rows = list(
            Span.objects.filter(project=project, run_id="")
            .order_by("pk")
            .values_list("pk", "trace_id", "conversation")[:chunk]
        )
        pks = [pk for pk, _, _ in rows]
        if not rows or pks == last:
            if rows:  # derived, yet still pending: never loop on them
                log.warning("otlp: project %s: %d spans could not be derived", project.pk, len(rows))
            return found
        last = pks
        found += len(rows)
        do_derive_runs(project, {t for _, t, _ in rows}, {c for _, _, c in rows if c}, changed_only=True)


def _closure(project: Project, traces: set[str], conversations: set[str]) -> list[Span]:
    """Every stored span of these traces and conversations, and of the traces and conversations those
    spans name in turn (`_CLOSURE_ROUNDS` deep)."""
    for _ in range(_CLOSURE_ROUNDS):
        found = Span.objects.filter(project=project, conversation__in=conversations).values_list(
            "trace_id", flat=True
        )
        more_traces = set(found) - traces
        named = set(
            Span.objects.filter(project=project, trace_id__in=traces | more_traces)
            .exclude(conversation="")
            .values_list("conversation", flat=True)
        )
        more_conversations = named - conversations
        traces |= more_traces
        conversations |= more_conversations
        if not more_traces and not more_conversations:
            break
    return list(Span.objects.filter(project=project, trace_id__in=traces).order_by("pk"))


def _lock_spans_of(project: Project, wait: bool = True) -> None:
    """Serialize the derivations of one project's spans: each reads the spans of the runs it touches
    and replaces their events, so two batches of one conversation must not interleave (the later one
    would write the events of the spans it saw before the other's committed). PostgreSQL: a
    transaction-scoped advisory lock per project (raw spans are still stored concurrently). SQLite
    has one writer at a time: the first write of the transaction takes it, before any read here."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            if wait:
                cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [_LOCK_NAMESPACE, project.pk])
                return
            cursor.execute("SELECT pg_try_advisory_xact_lock(%s, %s)", [_LOCK_NAMESPACE, project.pk])
            if not cursor.fetchone()[0]:
                raise DerivationBusy(project.pk)
    else:
        Project.objects.filter(pk=project.pk).update(slug=project.slug)  # takes SQLite's write lock


#: The advisory lock namespace of span derivations (a constant: "ARCA" in ASCII).
_LOCK_NAMESPACE = 0x41524341


def do_derive_runs(
    project: Project,
    traces: set[str],
    conversations: set[str],
    result: SpanResult | None = None,
    *,
    changed_only: bool = False,
    read: dict[tuple[str, str], tuple[bytes, NormalizedSpan]] | None = None,
    wait: bool = True,
) -> SpanResult:
    """Derive again the runs of these traces and conversations from all their stored spans, in one
    transaction under the project's span lock (`_lock_spans_of`): the spans are read after the lock,
    so every span committed before it is in the runs written. `changed_only`: only the runs that
    gained or lost spans since they were last derived (a span sent again changes nothing). `read`:
    spans normalized already, with the body they were stored with (a stored span whose body is
    another, sent by someone else first, is read from its row). `wait=False`: raise `DerivationBusy`
    instead of waiting when another derivation of the project holds the lock (PostgreSQL).

    A run whose new spans only append model calls keeps its stored events and gains the new steps'
    (`span_append`); any other is derived whole: its events and projections replaced."""
    result = result if result is not None else SpanResult()
    with transaction.atomic():
        _lock_spans_of(project, wait)
        rows = _closure(project, set(traces), set(conversations))
        by_key: dict[tuple[str, str], Span] = {(r.trace_id, r.span_id): r for r in rows}
        normalized = [_normalized(r, read or {}) for r in rows]
        groups = []
        stale: set[str] = set()
        for run_key, run_spans in group_runs(normalized).items():
            run_id = run_id_for(run_key)
            run_rows = [by_key[(s["trace_id"], s["span_id"])] for s in run_spans]
            stale.update(row.run_id for row in run_rows if row.run_id != run_id)
            groups.append((run_id, run_spans, run_rows))
        derived = [g for g in groups if not changed_only or g[0] in stale or _gained(g[0], g[2])]
        events, whole, moved = _derive(project, derived)
        result.runs += [run_id for run_id, _, _ in derived]
        stale -= {"", *(run_id for run_id, _, _ in groups)}
        _set_run_ids(moved)
        _forget_events(project, whole)
        _ingest_derived(project, events, result)
        for run_id in stale:  # a trace's own run, now part of its conversation's
            if not Span.objects.filter(project=project, run_id=run_id).exists():
                for old in Run.objects.filter(project=project, run_id=run_id):
                    do_delete_run(old)
    return result


def _normalized(row: Span, read: dict[tuple[str, str], tuple[bytes, NormalizedSpan]]) -> NormalizedSpan:
    body = bytes(row.body)
    known = read.get((row.trace_id, row.span_id))
    if known is not None and known[0] == body:
        return known[1]
    return normalize_span(stored_span(body))


def _gained(run_id: str, rows: list[Span]) -> bool:
    return any(row.run_id != run_id for row in rows)


_Group = tuple[str, list[NormalizedSpan], list[Span]]


def _derive(project: Project, groups: list[_Group]) -> tuple[list[dict[str, Any]], list[str], list[Span]]:
    """The events to write for these runs, the runs derived whole (their stored events to be
    replaced), and the span rows whose `run_id` changed (set on the rows)."""
    assembled = []
    for run_id, run_spans, run_rows in groups:
        run = assemble_run(run_spans)
        steps = appended_steps(run, run_spans, run_rows, run_id)
        assembled.append((run_id, run, steps))
    stored = stored_decisions(project, [run_id for run_id, _, steps in assembled if steps is not None])
    events: list[dict[str, Any]] = []
    whole: list[str] = []
    for run_id, run, steps in assembled:
        run_events = events_for_run(run, run_id)
        if steps is not None and decisions_agree(run_events, steps, stored[run_id]):
            events += events_of_steps(run_events, steps)
        else:
            events += run_events
            whole.append(run_id)
    moved: list[Span] = []
    for run_id, _, run_rows in groups:
        for row in run_rows:
            if row.run_id != run_id:
                row.run_id = run_id
                moved.append(row)
    return events, whole, moved


def _set_run_ids(rows: list[Span]) -> None:
    """Each row's `run_id` written: one statement on PostgreSQL, one per run elsewhere."""
    if not rows:
        return
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {Span._meta.db_table} AS s SET run_id = v.run_id "
                "FROM unnest(%s::bigint[], %s::text[]) AS v(id, run_id) WHERE s.id = v.id",
                [[r.pk for r in rows], [r.run_id for r in rows]],
            )
        return
    by_run: dict[str, list[int]] = {}
    for r in rows:
        by_run.setdefault(r.run_id, []).append(r.pk)
    for run_id, pks in by_run.items():
        for i in range(0, len(pks), 500):
            Span.objects.filter(pk__in=pks[i : i + 500]).update(run_id=run_id)


def _forget_events(project: Project, run_ids: list[str]) -> None:
    """These runs' derived events and projections deleted and their running totals forgotten
    (`Run.tally`, the event count), so `ingest_events` projects and counts them from their new events
    alone. The run rows stay (their notes and share links with them), locked until the transaction
    ends. A fixed number of statements for any number of runs."""
    runs = list(
        Run.objects.select_for_update()
        .filter(project=project, run_id__in=run_ids)
        .order_by("run_id")
        .values_list("pk", flat=True)
    )
    old = Event.objects.filter(project=project, run_id__in=run_ids)
    old._raw_delete(old.db)
    if runs:
        delete_projections(runs)
        Run.objects.filter(pk__in=runs).update(tally=None, events=0)


def _ingest_derived(project: Project, events: list[dict[str, Any]], result: SpanResult) -> None:
    """Every derived event of the batch's runs through one `ingest_events` call (its bulk writes and
    projections serve all the runs at once); an event it refuses is named in `result.problems`."""
    if not events:
        return
    answer = ingest_events(project, events, source="otlp", raw_texts=[event_text(ev) for ev in events])
    for r in answer.results:
        if r.status == "rejected":
            problem = f"run {events[r.index]['run_id']!r}: derived event {r.index} not stored: {r.error}"
            result.problems.append(problem)
            log.warning("otlp: %s", problem)
