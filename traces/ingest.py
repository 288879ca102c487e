"""The one writer of trace rows (DESIGN.md §3): raw events first, then projections.

Every source — `POST /api/v1/ingest`, the `process_upload` task, `manage.py import_traces`, and the
worker's in-process sink — calls `ingest_events` (or `ingest_jsonl` for files, which calls it per chunk).

Verbs, as in zulip (STYLE.md item 6): `check_*` validate untrusted input and raise `TraceFormatError`
with a reason; `do_*` write and assume valid input.

Contract of `ingest_events(project, events, source=...)`:

1. Each item is checked on its own (`check_event`): the Arcana envelope through `TraceEvent.from_dict`
   (the product's one parser). Unknown event types and metadata keys are legal and kept raw. A bad item
   is `rejected` with its index and reason; the other items are still written.
2. Raw first and idempotent: an event is keyed by `(project, run_id, step_id)`. One already stored (or
   repeated earlier in the same batch) is a `duplicate` and changes nothing.
3. One transaction per batch. The runs the batch touches are created if missing and locked, in run_id
   order so two writers never deadlock (PostgreSQL: one `INSERT … ON CONFLICT DO UPDATE … RETURNING`;
   elsewhere `ON CONFLICT DO NOTHING` then `SELECT … FOR UPDATE`); then new raw events are written with
   one bulk insert (COPY on PostgreSQL).
4. Projections of every run that gained events are recomputed from ALL its raw events, in a canonical
   order (timestamp, then step_id), and replace the old ones. The projection is a pure function of the
   set of raw events, so it converges whatever the order and batching of arrival, and
   `do_rebuild_projections` gives identical rows. A run first seen in this batch skips the reads (its
   events are all in memory) and the deletes.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import io
import json
import logging
import operator
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from functools import reduce
from typing import IO, Any, Literal

from django.conf import settings
from django.db import connection, models, transaction
from django.db.models import Q
from django.utils import timezone

from runtime._trace import TraceEvent, decode_jsonl_line
from runtime._trace_reader import (
    PinLifetime,
    StepView,
    TurnView,
    build_steps,
    normalize_events,
    pin_lifetimes,
)
from runtime.errors import TraceFormatError
from traces.models import (
    MESSAGE_DECISION_KEYS,
    ContextDecision,
    Event,
    Pin,
    PrimitiveEvent,
    Project,
    Run,
    Step,
    Turn,
    pack_message_decisions,
)

log = logging.getLogger(__name__)

Status = Literal["accepted", "duplicate", "rejected"]
Source = Literal["api", "upload", "cli", "worker", "rebuild"]


@dataclass(frozen=True)
class EventResult:
    """The fate of one input item. `index` is 0-based in the batch (a file line for JSONL callers)."""

    index: int
    status: Status
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"index": self.index, "status": self.status}
        if self.error is not None:
            out["error"] = self.error
        return out


@dataclass
class IngestResult:
    """Counts and per-item results of one `ingest_events` call, and the run ids it touched."""

    accepted: int = 0
    duplicates: int = 0
    rejected: int = 0
    results: list[EventResult] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "accepted": self.accepted,
            "duplicates": self.duplicates,
            "rejected": self.rejected,
            "results": [r.to_dict() for r in self.results],
        }


@dataclass(frozen=True)
class CheckedEvent:
    """A validated event with its raw JSON text, ready for `do_ingest`."""

    index: int
    event: TraceEvent
    raw: str


# --------------------------------------------------------------------------------------------------
# check_*


def check_event(data: Any, *, index: int | None = None) -> TraceEvent:
    """Validate one untrusted decoded JSON value as a trace event. Raises `TraceFormatError`."""
    ev = TraceEvent.from_dict(data, line=index)
    agent = ev.metadata.get("source_agent")
    if agent is not None and not isinstance(agent, str):
        raise TraceFormatError("'metadata.source_agent' must be a string", line=index)
    return ev


def check_events(
    items: list[Any], *, raw_texts: list[str | None] | None = None
) -> tuple[list[CheckedEvent], list[EventResult]]:
    """Check every item; returns the valid ones and a `rejected` result for each bad one."""
    ok: list[CheckedEvent] = []
    bad: list[EventResult] = []
    for i, item in enumerate(items):
        try:
            ev = check_event(item)
        except TraceFormatError as exc:
            bad.append(EventResult(i, "rejected", exc.reason))
            continue
        raw = raw_texts[i] if raw_texts is not None else None
        if raw is None:
            raw = json.dumps(item, ensure_ascii=False, separators=(",", ":"))
        ok.append(CheckedEvent(i, ev, raw))
    return ok, bad


# --------------------------------------------------------------------------------------------------
# The entry point


def ingest_events(
    project: Project,
    events: list[Any],
    *,
    source: Source,
    raw_texts: list[str | None] | None = None,
) -> IngestResult:
    """Validate and store a batch of events for `project`; see the module docstring for the contract.

    `raw_texts[i]`, when given, is the exact JSON text of `events[i]` (JSONL callers pass the line, so
    the stored raw event is byte-for-byte what the producer wrote). Results are in input order.
    """
    checked, rejected = check_events(events, raw_texts=raw_texts)
    statuses = do_ingest(project, checked) if checked else {}
    result = IngestResult()
    by_index = {r.index: r for r in rejected}
    for c in checked:
        by_index[c.index] = EventResult(c.index, statuses[c.index])
    result.results = [by_index[i] for i in range(len(events))]
    for r in result.results:
        if r.status == "accepted":
            result.accepted += 1
        elif r.status == "duplicate":
            result.duplicates += 1
        else:
            result.rejected += 1
    result.runs = sorted({c.event.run_id for c in checked})
    log.debug("ingest via %s: %s accepted, %s duplicates", source, result.accepted, result.duplicates)
    return result


def parse_batch(body: bytes | str) -> tuple[Any, list[str | None] | None]:
    """Decode a `POST /api/v1/ingest` body. Returns `(payload, raw_texts)`.

    For the usual shape, an object whose only key is `"events"` holding an array, `payload` is
    `{"events": [...]}` and `raw_texts[i]` is the exact JSON text of `events[i]` in the body (stored as
    the raw event, so nothing is re-serialised and the producer's bytes are kept). Any other body is
    decoded with `json.loads` and `raw_texts` is None. Raises `json.JSONDecodeError` /
    `UnicodeDecodeError` for a body that is not JSON, exactly as `json.loads(body)` would.
    """
    try:
        return _scan_batch(body.decode("utf-8") if isinstance(body, bytes | bytearray) else body)
    except (ValueError, IndexError):
        # Not the usual shape (or not JSON): the plain decoder gives the answer and the error message.
        return json.loads(body), None


_WS = " \t\n\r"
_decode_at = json.JSONDecoder().raw_decode


def _skip(text: str, i: int) -> int:
    while text[i] in _WS:
        i += 1
    return i


def _scan_batch(text: str) -> tuple[dict[str, Any], list[str | None]]:
    """`{"events": [v, …]}` scanned element by element with the C decoder; raises ValueError otherwise."""
    i = _skip(text, 0)
    if text[i] != "{":
        raise ValueError("not an object")
    i = _skip(text, i + 1)
    key, i = _decode_at(text, i)
    if key != "events":
        raise ValueError("not the events key")
    i = _skip(text, i)
    if text[i] != ":":
        raise ValueError("no colon")
    i = _skip(text, i + 1)
    if text[i] != "[":
        raise ValueError("events is not an array")
    i = _skip(text, i + 1)
    events: list[Any] = []
    raws: list[str | None] = []
    if text[i] == "]":
        i += 1
    else:
        while True:
            value, end = _decode_at(text, i)
            events.append(value)
            raws.append(text[i:end])
            i = _skip(text, end)
            if text[i] == ",":
                i = _skip(text, i + 1)
                continue
            if text[i] == "]":
                i += 1
                break
            raise ValueError("bad array")
    i = _skip(text, i)
    if text[i] != "}":
        raise ValueError("more keys")
    if text[i + 1 :].strip(_WS):
        raise ValueError("trailing data")
    return {"events": events}, raws


# --------------------------------------------------------------------------------------------------
# do_*


def _lock_runs(project: Project, run_ids: list[str]) -> dict[str, Run]:
    """Create the runs that do not exist and lock them all. Must run inside a transaction.

    Why: two writers streaming the same run would otherwise both read "no events yet" and write
    projections over each other. Creating with ON CONFLICT DO NOTHING then locking with FOR UPDATE
    serialises them per run; sorting the ids gives every writer the same lock order (no deadlock).
    """
    now = timezone.now()
    if connection.vendor == "postgresql":
        return _upsert_runs(project, run_ids, now)
    Run.objects.bulk_create(
        [Run(project=project, run_id=rid, created_at=now, updated_at=now) for rid in run_ids],
        ignore_conflicts=True,
    )
    locked = Run.objects.select_for_update().filter(project=project, run_id__in=run_ids).order_by("run_id")
    return {run.run_id: run for run in locked}


def _upsert_runs(project: Project, run_ids: list[str], now: datetime) -> dict[str, Run]:
    """PostgreSQL: create and lock the runs in one statement. `ON CONFLICT DO UPDATE` (a no-op update)
    takes the row lock of an existing run as `SELECT … FOR UPDATE` would, and `RETURNING` gives the
    rows; the input is sorted so every writer locks in the same order (no deadlock)."""
    fields = [f for f in Run._meta.concrete_fields if not f.primary_key]
    qn = connection.ops.quote_name
    template = Run(project=project, run_id="", created_at=now, updated_at=now)
    values = [f.get_db_prep_save(getattr(template, f.attname), connection) for f in fields]
    at = [f.attname for f in fields].index("run_id")
    row_sql = "(" + ", ".join(["%s"] * len(fields)) + ")"
    params: list[Any] = []
    for rid in sorted(run_ids):
        values[at] = rid
        params.extend(values)
    names = ["id", *(f.column for f in fields)]
    sql = (
        f"INSERT INTO {qn(Run._meta.db_table)} ({', '.join(qn(f.column) for f in fields)}) "
        f"VALUES {', '.join([row_sql] * len(run_ids))} "
        f"ON CONFLICT ({qn('project_id')}, {qn('run_id')}) DO UPDATE SET {qn('run_id')} = EXCLUDED.{qn('run_id')} "
        f"RETURNING {', '.join(qn(c) for c in names)}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    attnames = ["id", *(f.attname for f in fields)]
    runs = [Run.from_db(connection.alias, attnames, _from_db_row(row)) for row in rows]
    return {run.run_id: run for run in runs}


@functools.cache
def _run_converters() -> tuple[Callable[[Any], Any], ...]:
    """Per column of `Run` (id first), the conversion Django applies to a raw value (jsonb text → list)."""
    fields = [f for f in Run._meta.concrete_fields if not f.primary_key]
    out: list[Callable[[Any], Any]] = [lambda v: v]
    for f in fields:
        if isinstance(f, models.JSONField):
            out.append(lambda v: json.loads(v) if isinstance(v, str) else v)
        else:
            out.append(lambda v: v)
    return tuple(out)


def _from_db_row(row: tuple[Any, ...]) -> list[Any]:
    return [conv(v) for conv, v in zip(_run_converters(), row, strict=True)]


def do_ingest(project: Project, checked: list[CheckedEvent]) -> dict[int, Status]:
    """Write valid events (raw first), then recompute the projections of the runs that gained events.

    One transaction; returns `accepted` / `duplicate` per input index."""
    statuses: dict[int, Status] = {}
    by_run: dict[str, dict[str, CheckedEvent]] = {}
    for c in checked:
        run_events = by_run.setdefault(c.event.run_id, {})
        if c.event.step_id in run_events:
            statuses[c.index] = "duplicate"  # repeated inside this batch: the first one wins
        else:
            run_events[c.event.step_id] = c
    run_ids = sorted(by_run)
    with transaction.atomic():
        runs = _lock_runs(project, run_ids)
        # Runs with stored events may already hold some of these; new runs cannot (we hold their lock).
        existing: set[tuple[str, str]] = set()
        seen_runs = [rid for rid in run_ids if runs[rid].events > 0]
        if seen_runs:
            step_ids = [sid for rid in seen_runs for sid in by_run[rid]]
            existing = set(
                Event.objects.filter(project=project, run_id__in=seen_runs, step_id__in=step_ids).values_list(
                    "run_id", "step_id"
                )
            )
        now = timezone.now()
        # Raw rows as plain tuples (not model instances): this is the hottest loop of ingestion.
        new_rows: list[tuple[Any, ...]] = []
        fresh: dict[str, list[TraceEvent]] = {}
        for rid in run_ids:
            for sid, c in by_run[rid].items():
                if (rid, sid) in existing:
                    statuses[c.index] = "duplicate"
                    continue
                statuses[c.index] = "accepted"
                ev = c.event
                new_rows.append(
                    (project.pk, rid, sid, ev.parent_step_id, ev.event_type, ev.source_agent or "",
                     ev.timestamp_dt, c.raw, now, local_turn(ev))
                )  # fmt: skip
                fresh.setdefault(rid, []).append(ev)
        _insert_events(new_rows)
        changed = [runs[rid] for rid in run_ids if rid in fresh]
        # New runs: every event is in memory. Incremental runs: only the touched turns. Others: all.
        full = [run for run in changed if run.events == 0]
        reload: list[Run] = []
        for run in changed:
            if run.events == 0:
                continue
            if not (run.incremental and _batch_is_local(fresh[run.run_id])):
                reload.append(run)
            elif not do_project_turns(project, run, fresh[run.run_id]):
                reload.append(run)  # a case the turn-by-turn path does not cover: project it whole
        events_of: dict[int, list[TraceEvent]] = {run.pk: fresh[run.run_id] for run in full}
        events_of.update(_load_events(project, reload))
        do_write_projections(full + reload, events_of, replace=[run.pk for run in reload])
    return statuses


def local_turn(ev: TraceEvent) -> int | None:
    """The turn of one of our runtime's events (`metadata.turn`, fixed whatever else arrives), else None.

    Such an event belongs to turn (agent, turn) on its own; Arcana events find their turn through
    other events, so runs holding any are always projected whole."""
    if not ev.is_ours:
        return None
    turn = ev.metadata.get("turn")
    return turn if turn.__class__ is int and 0 <= turn < 2**31 else None


def _batch_is_local(events: list[TraceEvent]) -> bool:
    return all(local_turn(ev) is not None and ev.stop_reason != "error" for ev in events)


def _load_events(project: Project, runs: list[Run]) -> dict[int, list[TraceEvent]]:
    """Every stored event of these runs, parsed (they were validated when stored)."""
    if not runs:
        return {}
    pk_of = {run.run_id: run.pk for run in runs}
    out: dict[int, list[TraceEvent]] = {run.pk: [] for run in runs}
    rows = Event.objects.filter(project=project, run_id__in=list(pk_of)).values_list(
        "pk", "run_id", "raw", "turn"
    )
    stale: list[tuple[int | None, int]] = []
    for pk, rid, raw, turn in rows.iterator(chunk_size=2000):
        ev = TraceEvent.from_dict(json.loads(raw))
        out[pk_of[rid]].append(ev)
        if turn != local_turn(ev):
            stale.append((local_turn(ev), pk))
    if stale:
        # Rows stored before `Event.turn` existed: fill it in, so the run can go turn by turn from now on.
        with connection.cursor() as cursor:
            cursor.executemany("UPDATE traces_event SET turn = %s WHERE id = %s", stale)
    return out


def _parse_stored(raw: str) -> TraceEvent:
    return TraceEvent.from_dict(json.loads(raw))


def do_rebuild_projections(*, project: Project | None = None, run_id: str | None = None) -> int:
    """Recompute projections of every run (of `project`, or the one `run_id`) from raw events.

    Gives the same rows as ingestion did. One transaction per run, with the run locked. Returns the
    number of runs rebuilt."""
    qs = Run.objects.all()
    if project is not None:
        qs = qs.filter(project=project)
    if run_id is not None:
        qs = qs.filter(run_id=run_id)
    count = 0
    for pk in qs.order_by("pk").values_list("pk", flat=True):
        with transaction.atomic():
            run = Run.objects.select_for_update().select_related("project").get(pk=pk)
            events = _load_events(run.project, [run])
            do_write_projections([run], events, replace=[run.pk])
        count += 1
    return count


# --------------------------------------------------------------------------------------------------
# Projections (pure computation, then bulk writes)


def _sort_key(ev: TraceEvent) -> tuple[datetime, str]:
    return (ev.timestamp_dt, ev.step_id)


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def message_decision(d: Any) -> list[Any]:
    """One message decision as a stored row: the values of `MESSAGE_DECISION_KEYS`, in that order
    (`pinned` true for `reason == "pinned"` as well)."""
    src = _dict(d)
    return [
        _int(src.get("index")),
        _str(src.get("role")),
        _str(src.get("outcome")),
        _str(src.get("fidelity")),
        _num(src.get("relevance_score")),
        _int(src.get("token_count_before")),
        _int(src.get("token_count_after")),
        _str(src.get("reason")),
        src.get("pinned") is True or src.get("reason") == "pinned",
        _str(src.get("pin_id")),
    ]


# The row layout above, and the indexes `_decision_row` reads.
assert MESSAGE_DECISION_KEYS == (
    "index", "role", "outcome", "fidelity", "relevance_score", "token_count_before", "token_count_after",
    "reason", "pinned", "pin_id",
)  # fmt: skip
_OUTCOME, _PINNED = 2, 8


def message_decisions(value: Any) -> list[list[Any]]:
    """`message_decision` of every object in a `decisions` list (other items are skipped).

    Same result as `[message_decision(x) for x in value if isinstance(x, dict)]`, with the common
    types tested inline: a context decision carries up to hundreds of these per step."""
    if not isinstance(value, list):
        return []
    out: list[list[Any]] = []
    append = out.append
    for src in value:
        if src.__class__ is not dict:
            if isinstance(src, dict):
                append(message_decision(src))
            continue
        g = src.get
        index, role, outcome, fidelity = g("index"), g("role"), g("outcome"), g("fidelity")
        score, before, after, reason = (
            g("relevance_score"),
            g("token_count_before"),
            g("token_count_after"),
            g("reason"),
        )
        pin_id = g("pin_id")
        append(
            [
                index if index.__class__ is int else _int(index),
                role if role is None or role.__class__ is str else _str(role),
                outcome if outcome is None or outcome.__class__ is str else _str(outcome),
                fidelity if fidelity is None or fidelity.__class__ is str else _str(fidelity),
                float(score) if score.__class__ is float else _num(score),
                before if before.__class__ is int else _int(before),
                after if after.__class__ is int else _int(after),
                reason if reason is None or reason.__class__ is str else _str(reason),
                g("pinned") is True or reason == "pinned",
                pin_id if pin_id is None or pin_id.__class__ is str else _str(pin_id),
            ]
        )  # fmt: skip
    return out


def _usage(usage: Any) -> tuple[int, int, int]:
    u = _dict(usage)
    p = _int(u.get("prompt_tokens")) or 0
    c = _int(u.get("completion_tokens")) or 0
    t = _int(u.get("total_tokens")) or (p + c)
    return p, c, t


def primitive_outcome(primitive: str, result: Any) -> tuple[bool, str]:
    """Whether a primitive call did what it asked, and a one-line note (what the CLI prints)."""
    r = _dict(result)
    if not isinstance(result, dict):
        return False, "no result"
    if r.get("error"):
        detail = _str(r.get("detail"))
        return False, f"{r['error']}: {detail}" if detail else str(r["error"])
    if primitive == "pin":
        if r.get("pinned") is False:
            return False, f"rejected: {r.get('reason') or 'unknown reason'}"
        if r.get("already_pinned") is True:
            return True, f"already pinned as {r.get('pin_id')}"
        return True, f"pin_id={r.get('pin_id')} label={r.get('label')!r}"
    if primitive == "unpin":
        if r.get("unpinned") is False:
            return False, _str(r.get("note")) or f"{r.get('pin_id')} not unpinned"
        return True, f"unpinned {r.get('pin_id')}"
    if primitive == "recall":
        if r.get("found") is False:
            return False, _str(r.get("note")) or "not found"
        messages = r.get("messages")
        n = len(messages) if isinstance(messages, list) else 0
        return True, f"turn={r.get('turn')} → {n} messages"
    return True, _str(r.get("note")) or ""


@dataclass
class _Projection:
    """Projection rows of one run as plain dicts of column values (attnames; FKs filled in at write)."""

    run_fields: dict[str, Any]
    turns: list[dict[str, Any]]
    steps: list[tuple[int, dict[str, Any]]]  # (index of its turn in `turns`, step row)
    decisions: list[tuple[int, dict[str, Any]]]  # (index of its step in `steps`, decision row)
    primitives: list[tuple[int | None, dict[str, Any]]]
    pins: list[dict[str, Any]]


def _step_row(sv: StepView) -> dict[str, Any]:
    te = sv.turn_event
    md = te.metadata if te is not None else {}
    facts = _dict(md.get("facts"))
    assessment = _dict(md.get("assessment"))
    prompt, completion, total = _usage(facts.get("usage"))
    chat_calls = [e for e in sv.llm_calls if e.metadata.get("purpose") != "summarize" and e.is_ours]
    if not facts.get("usage") and chat_calls:
        for e in chat_calls:
            p, c, t = _usage(e.metadata.get("usage"))
            prompt, completion, total = prompt + p, completion + c, total + t
    model = (te.model if te is not None else None) or ""
    if not model and sv.prompt_snapshot is not None:
        model = (
            sv.prompt_snapshot.model
            or _str(_dict(sv.prompt_snapshot.metadata.get("prompt_snapshot")).get("model"))
            or ""
        )
    if not model:
        model = next((e.model for e in chat_calls if e.model), "") or ""
    latency = te.llm_latency_ms if te is not None else None
    if latency is None and chat_calls:
        lat = [_int(e.metadata.get("latency_ms")) or e.llm_latency_ms for e in chat_calls]
        latency = sum(x for x in lat if x is not None) if any(x is not None for x in lat) else None
    tool_calls = facts.get("tool_calls")
    snapshot = sv.prompt_snapshot.metadata.get("prompt_snapshot") if sv.prompt_snapshot is not None else None
    messages = md.get("messages")
    completed = assessment.get("completed")
    failed = assessment.get("failed")
    tool_calls = tool_calls if isinstance(tool_calls, list) else []
    return {
        "agent": sv.agent or "",
        "turn_number": sv.turn,
        "number": sv.step,
        "step_id": sv.step_id,
        "model": model[:200],
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": total,
        "finish_reason": (_str(facts.get("finish_reason")) or "")[:50],
        "assistant_text": _str(facts.get("assistant_text")),
        "tool_calls": tool_calls,
        "tool_results": tool_results(sv, tool_calls),
        "messages": messages if isinstance(messages, list) else None,
        "prompt_snapshot": snapshot if isinstance(snapshot, dict) else None,
        "latency_ms": latency if latency is None or latency >= 0 else None,
        "completed": completed if isinstance(completed, bool) else None,
        "failed": failed if isinstance(failed, bool) else None,
        "started_at": min(ne.event.timestamp_dt for ne in sv.events),
    }


#: What the turn page says for a call the model made that left no event (arcana-agent 1.2 writes none
#: for a tool that is not registered: its §7 item 13).
UNRECORDED_CALL = "no event recorded (arcana-agent 1.2 writes none for a tool that is not registered)"


def tool_results(sv: StepView, requested: list[Any]) -> list[dict[str, Any]]:
    """The step's tool results, one dict per answered (or, for Arcana, unanswered) tool call.

    Keys: `tool_call_id, name, arguments, result, recorded, error, error_category, duration_ms,
    side_effect, args_digest, result_digest, ok, event`. Sources: `tool_call` events (the envelope
    record gives name, error, duration, digests; ours add `metadata.tool_call_id/arguments/result`,
    so `recorded` is True), and our `error` events naming a `tool_call_id` (an unknown tool: `result`
    is what the model was told). arcana-agent 1.2 keeps digests only (`recorded` False) and writes no
    event for an unknown tool, so a call of an Arcana step that no `tool_call` / `cognitive_primitive`
    event answers (matched by name) is listed failed with `event: None`. Primitive calls are not here
    (`PrimitiveEvent`). Order: the order the model asked for the calls, then event order."""
    asked = [tc for tc in requested if isinstance(tc, dict)]
    name_of = {tc.get("id"): _str(tc.get("name")) for tc in asked if isinstance(tc.get("id"), str)}
    ours = sv.turn_event.is_ours if sv.turn_event is not None else any(ne.event.is_ours for ne in sv.events)
    out: list[dict[str, Any]] = []
    for ev in sv.tool_calls:
        rec, md = _dict(ev.tool_call), ev.metadata
        call_id = _str(md.get("tool_call_id"))
        error = rec.get("error")
        error_text = (
            None if error is None or error == "" else error if isinstance(error, str) else _dumps(error)
        )
        out.append(
            {"tool_call_id": call_id, "name": _str(rec.get("name")) or name_of.get(call_id) or "?",
             "arguments": md.get("arguments"), "result": md.get("result"), "recorded": "result" in md,
             "error": error_text, "error_category": _str(rec.get("error_category")),
             "duration_ms": _int(rec.get("duration_ms")), "side_effect": _str(rec.get("side_effect")),
             "args_digest": _str(rec.get("args_digest")), "result_digest": _str(rec.get("result_digest")),
             "ok": error_text is None, "event": "tool_call"}
        )  # fmt: skip
    for ev in sv.errors:
        md = ev.metadata
        call_id = _str(md.get("tool_call_id"))
        if call_id is None:
            continue  # a provider failure, not the answer to a tool call
        result = md.get("result")
        if result is None:
            result = md.get("message") or md.get("error")
        asked_args = next((tc.get("arguments") for tc in asked if tc.get("id") == call_id), None)
        out.append(
            {"tool_call_id": call_id, "name": name_of.get(call_id) or "?", "arguments": asked_args,
             "result": result, "recorded": True, "error": _str(md.get("error")) or "error",
             "error_category": _str(md.get("error_category")), "duration_ms": None, "side_effect": None,
             "args_digest": None, "result_digest": None, "ok": False, "event": "error"}
        )  # fmt: skip
    # Position of each result in the model's request list.
    position: list[int] = []
    if ours:
        index_of = {tc.get("id"): i for i, tc in enumerate(asked)}
        position = [index_of.get(r["tool_call_id"], len(asked)) for r in out]
    else:
        free = list(range(len(asked)))
        primitives = [_str(ev.metadata.get("primitive")) for ev in sv.primitive_calls]
        for r in out:
            i = next((i for i in free if _str(asked[i].get("name")) == r["name"]), None)
            position.append(len(asked) if i is None else i)
            if i is not None:
                free.remove(i)
        for name in primitives:
            i = next((i for i in free if _str(asked[i].get("name")) == name), None)
            if i is not None:
                free.remove(i)
        for i in free:
            tc = asked[i]
            out.append(
                {"tool_call_id": _str(tc.get("id")), "name": _str(tc.get("name")) or "?",
                 "arguments": tc.get("arguments"), "result": None, "recorded": False,
                 "error": UNRECORDED_CALL, "error_category": None, "duration_ms": None, "side_effect": None,
                 "args_digest": None, "result_digest": None, "ok": False, "event": None}
            )  # fmt: skip
            position.append(i)
    order = sorted(range(len(out)), key=lambda k: position[k])
    return [out[k] for k in order]


def _decision_row(sv: StepView) -> dict[str, Any] | None:
    cd = sv.context_decision
    if cd is None:
        return None
    md = cd.metadata
    d = _dict(md.get("context_decision"))
    report = md.get("context_report")
    rows = message_decisions(d.get("decisions"))
    explanation = _str(d.get("explanation")) or _str(md.get("explanation")) or ""
    compressed = _int(d.get("compressed_count"))
    if compressed is None:
        compressed = _int(md.get("compressed_count")) or 0
    return {
        "agent": sv.agent or "",
        "turn_number": sv.turn,
        "step_number": sv.step,
        "strategy": (_str(d.get("strategy")) or _str(_dict(report).get("strategy_used")) or "")[:100],
        "budget_total": _int(d.get("budget_total")),
        "budget_used": _int(d.get("budget_used")),
        "budget_tools": _int(d.get("budget_tools")),
        "budget_reserve": _int(d.get("budget_reserve")),
        "messages_in": _int(d.get("messages_in", md.get("messages_in"))),
        "messages_out": _int(d.get("messages_out", md.get("messages_out"))),
        "compressed_count": compressed,
        "pinned_count": sum(1 for r in rows if r[_PINNED]),
        "dropped_count": sum(1 for r in rows if r[_OUTCOME] == "dropped"),
        "explanation": explanation,
        "utilization": _num(_dict(report).get("utilization")),
        "report": report if isinstance(report, dict) else None,
        "message_table": pack_message_decisions(rows),
    }


def _primitive_row(ev: TraceEvent, sv: StepView | None, agent: str | None) -> dict[str, Any]:
    md = ev.metadata
    primitive = _str(md.get("primitive")) or ""
    result = md.get("result")
    ok, note = primitive_outcome(primitive, result)
    args = md.get("args")
    return {
        "agent": (sv.agent if sv is not None else agent) or "",
        "turn_number": sv.turn if sv is not None else None,
        "step_number": sv.step if sv is not None else None,
        "event_step_id": ev.step_id,
        "primitive": primitive[:50],
        "args": args if isinstance(args, dict) else {},
        "result": result if isinstance(result, dict) else {},
        "ok": ok,
        "note": note,
        "tool_call_id": (_str(md.get("tool_call_id")) or "")[:200],
        "timestamp": ev.timestamp_dt,
    }


def _run_status(last: TraceEvent, error_stop: bool, last_turn: TraceEvent | None) -> str:
    """`Run.status` from the run's last event, whether any event stopped on an error, and its last
    step's `turn` event (see `Run`)."""
    if last.event_type == "error" or error_stop:
        return Run.Status.FAILED
    if last_turn is not None:
        md = last_turn.metadata
        assessment = _dict(md.get("assessment"))
        facts = _dict(md.get("facts"))
        if assessment.get("failed") is True:
            return Run.Status.FAILED
        if assessment.get("completed") is True:
            return Run.Status.COMPLETED
        if facts.get("finish_reason") == "stop" and not facts.get("tool_calls"):
            return Run.Status.COMPLETED
    if last.stop_reason:
        return Run.Status.COMPLETED
    return Run.Status.RUNNING


#: Event types that belong to a step (docs/trace-format.md). A run holding none of them (an Arcana 1.2
#: session file: `history_seeded` only) will never have a step: it is `completed`, not `running`.
STEP_EVENT_TYPES = frozenset(
    {"turn", "context_decision", "prompt_snapshot", "llm_call", "tool_call", "cognitive_primitive", "error"}
)


def _new_turn(agent: str, number: int) -> dict[str, Any]:
    return {
        "agent": agent, "number": number, "steps": 0, "prompt_tokens": 0, "completion_tokens": 0,
        "tokens": 0, "peak_utilization": None, "strategy": "", "compressions": 0, "primitives": 0,
        "tool_calls": 0, "started_at": None, "ended_at": None,
    }  # fmt: skip


def _pin_row(p: PinLifetime) -> dict[str, Any]:
    return {
        "agent": p.agent or "",
        "pin_id": p.pin_id[:100],
        "label": (p.label or "")[:500],
        "content": p.content or "",
        "content_hash": hashlib.sha256(p.content.encode("utf-8")).hexdigest() if p.content else "",
        "tokens": p.tokens,
        "created_turn": p.created_turn,
        "created_step": p.created_step,
        "until_turn": p.until_turn,
        "unpinned_turn": p.unpinned_turn,
    }


def _project_turns(turn_views: list[TurnView]) -> tuple[_Projection, Counter[str]]:
    """Turn, step, decision and primitive rows of these turns (no pins, no run fields), and how many
    steps used each model."""
    proj = _Projection({}, [], [], [], [], [])
    turns, steps, decisions, primitives = proj.turns, proj.steps, proj.decisions, proj.primitives
    step_models: Counter[str] = Counter()
    for tv in turn_views:
        turn = _new_turn(tv.agent or "", tv.turn)
        t_index = len(turns)
        turns.append(turn)
        utils: list[float] = []
        strategy = ""
        for sv in tv.steps:
            step = _step_row(sv)
            s_index = len(steps)
            steps.append((t_index, step))
            if step["model"]:
                step_models[step["model"]] += 1
            turn["steps"] += 1
            turn["prompt_tokens"] += step["prompt_tokens"]
            turn["completion_tokens"] += step["completion_tokens"]
            turn["tokens"] += step["total_tokens"]
            turn["tool_calls"] += len(sv.tool_calls)
            turn["primitives"] += len(sv.primitive_calls)
            decision = _decision_row(sv)
            if decision is not None:
                decisions.append((s_index, decision))
                turn["compressions"] += decision["compressed_count"]
                strategy = decision["strategy"] or strategy
                if decision["utilization"] is not None:
                    utils.append(decision["utilization"])
            for ev in sv.primitive_calls:
                primitives.append((s_index, _primitive_row(ev, sv, None)))
            stamps = [ne.event.timestamp_dt for ne in sv.events]
            lo, hi = min(stamps), max(stamps)
            if turn["started_at"] is None or lo < turn["started_at"]:
                turn["started_at"] = lo
            if turn["ended_at"] is None or hi > turn["ended_at"]:
                turn["ended_at"] = hi
        turn["strategy"] = strategy
        turn["peak_utilization"] = max(utils) if utils else None
    return proj, step_models


def _top_model(step_models: Counter[str]) -> str | None:
    """The most used step model when one model leads outright, else None."""
    top = step_models.most_common(2)
    if not top or (len(top) == 2 and top[0][1] == top[1][1]):
        return None
    return top[0][0]


def _one_turn_event_per_step(turn_views: list[TurnView]) -> bool:
    return all(
        sum(1 for ne in sv.events if ne.event_type == "turn") <= 1 for tv in turn_views for sv in tv.steps
    )


def project_run(events: list[TraceEvent]) -> _Projection:
    """Compute every projection row of a run from its raw events (pure; no database access)."""
    events = sorted(events, key=_sort_key)
    normalized = normalize_events(events)
    turn_views = build_steps(normalized)
    proj, step_models = _project_turns(turn_views)
    # Primitive calls whose step is not known yet (its turn event has not arrived).
    for ne in normalized:
        if ne.event_type == "cognitive_primitive" and ne.turn is None:
            proj.primitives.append((None, _primitive_row(ne.event, None, ne.agent)))
    proj.pins = [_pin_row(p) for p in pin_lifetimes(turn_views)]
    turns = proj.turns
    by_primitive = Counter(
        ev.metadata.get("primitive") for ev in events if ev.event_type == "cognitive_primitive"
    )
    utils_all = [t["peak_utilization"] for t in turns if t["peak_utilization"] is not None]
    model = (
        step_models.most_common(1)[0][0] if step_models else next((e.model for e in events if e.model), "")
    )
    error_stop = any(e.stop_reason == "error" for e in events)
    last_turn = max(
        (sv.turn_event for tv in turn_views for sv in tv.steps if sv.turn_event is not None),
        key=_sort_key,
        default=None,
    )
    proj.run_fields = {
        "source": Run.Source.RUNTIME if any(e.is_ours for e in events) else Run.Source.ARCANA,
        "agents": sorted({ne.agent for ne in normalized if ne.agent}),
        "model": (model or "")[:200],
        "status": (
            Run.Status.COMPLETED
            if not proj.steps and not error_stop and not any(e.event_type in STEP_EVENT_TYPES for e in events)
            else _run_status(events[-1], error_stop, last_turn)
        ),
        "started_at": events[0].timestamp_dt,
        "ended_at": events[-1].timestamp_dt,
        "turns": len(turns),
        "steps": len(proj.steps),
        "events": len(events),
        "prompt_tokens": sum(t["prompt_tokens"] for t in turns),
        "completion_tokens": sum(t["completion_tokens"] for t in turns),
        "tokens": sum(t["tokens"] for t in turns),
        "tool_calls": sum(1 for e in events if e.event_type == "tool_call"),
        "errors": sum(1 for e in events if e.event_type == "error"),
        "primitives": sum(by_primitive.values()),
        "recall_count": by_primitive.get("recall", 0),
        "pin_count": by_primitive.get("pin", 0),
        "unpin_count": by_primitive.get("unpin", 0),
        "peak_utilization": max(utils_all) if utils_all else None,
        # Whether later batches may re-project only the turns they touch (`do_project_turns`): every
        # event is ours with a turn, and none of the whole-run facts that path does not track occurs.
        "incremental": (
            not error_stop
            and all(local_turn(e) is not None for e in events)
            and _one_turn_event_per_step(turn_views)
            and _top_model(step_models) is not None
        ),
    }
    return proj


_RUN_FIELDS = (
    "source agents model status started_at ended_at turns steps events prompt_tokens completion_tokens "
    "tokens tool_calls errors primitives recall_count pin_count unpin_count peak_utilization incremental "
    "updated_at"
).split()


def do_project_turns(project: Project, run: Run, new: list[TraceEvent]) -> bool:
    """Re-project only the turns of `run` that `new` events touch (they are stored already).

    For a run with `run.incremental` and a batch of our events with turns (`_batch_is_local`): a turn
    (agent, n) of such a run is a function of its own events and of the `turn` events they name as
    parent, so only the touched turns are recomputed; pins are recomputed per touched agent from its
    pin/unpin calls (and the working sets that rendered a pin with no token count); the run's counters
    are updated from the batch and a few aggregate queries. Gives exactly the rows `project_run` gives
    (tests/traces/test_ingest_incremental.py). Returns False, having changed nothing that the whole-run
    projection will not replace, when the run leaves the cases this covers; the caller then projects
    it whole. Must run inside the transaction holding the run's lock."""
    rid = run.run_id
    events = Event.objects.filter(project=project, run_id=rid)
    dirty: set[tuple[str, int]] = {(ev.source_agent or "", local_turn(ev)) for ev in new}  # type: ignore[misc]
    new_turn_ids = [ev.step_id for ev in new if ev.event_type == "turn"]
    if new_turn_ids:
        # A stored event naming a new turn event as parent: its turn may change (its step's id).
        for agent, turn in events.filter(parent_step_id__in=new_turn_ids).values_list("agent", "turn"):
            if turn is None:
                return False
            dirty.add((agent, turn))
    # The touched turns' events: the batch's from memory, the others parsed from their rows.
    new_ids = {ev.step_id for ev in new}
    loaded = list(new)
    for sid, agent, turn, raw in events.filter(turn__in=sorted({t for _, t in dirty})).values_list(
        "step_id", "agent", "turn", "raw"
    ):
        if (agent, turn) in dirty and sid not in new_ids:
            loaded.append(_parse_stored(raw))
    have = {ev.step_id for ev in loaded}
    parents = {
        ev.parent_step_id
        for ev in loaded
        if ev.event_type != "turn" and ev.parent_step_id and ev.parent_step_id not in have
    }
    if parents:
        # Turn events of other turns named as parents: normalize_events looks them up (the spine).
        loaded += [
            _parse_stored(raw)
            for raw in events.filter(step_id__in=parents, event_type="turn").values_list("raw", flat=True)
        ]
    turn_views = [
        tv
        for tv in build_steps(normalize_events(sorted(loaded, key=_sort_key)))
        if (tv.agent or "", tv.turn) in dirty
    ]
    if not _one_turn_event_per_step(turn_views):
        return False
    proj, _ = _project_turns(turn_views)
    by_agent: dict[str, list[int]] = {}
    for agent, turn in sorted(dirty):
        by_agent.setdefault(agent, []).append(turn)
    # One term per agent (not per turn): Django's cost of building a Q grows with its terms.
    in_dirty = reduce(operator.or_, (Q(agent=a, turn_number__in=ts) for a, ts in by_agent.items()))
    # Pins are a function of pin/unpin calls and of working sets that rendered a pin. When the touched
    # turns hold none (all their events are in `loaded`), the agents' pin rows cannot change: skip them.
    pin_agents: set[str] = set()
    if any(d["pinned_count"] for _, d in proj.decisions) or any(
        p["primitive"] in ("pin", "unpin") for _, p in proj.primitives
    ):
        pin_agents = {a for a, _ in dirty}
        proj.pins = _project_pins(project, run, pin_agents, in_dirty, turn_views)
    _delete_turns(run, by_agent, in_dirty, pin_agents)
    _insert_projections([(run, proj)])

    new_turns = [ev for ev in new if ev.event_type == "turn"]
    summary = _run_summary(
        project, run, max(new, key=_sort_key), max(new_turns, key=_sort_key) if new_turns else None
    )
    # The run's model: the most used over all steps (a tie is left to the whole-run projection, which
    # breaks it by step order).
    model = _top_model(summary.models)
    if model is None:
        return False  # the rows written above are replaced by the caller's whole-run projection
    # The run's counters: the batch's additions, and aggregates over the turns and the last events.
    agg = summary.turns
    last, last_turn = summary.last, summary.last_turn
    by_primitive = Counter(
        ev.metadata.get("primitive") for ev in new if ev.event_type == "cognitive_primitive"
    )
    stamps = [ev.timestamp_dt for ev in new]
    run.agents = sorted(set(run.agents) | {a for ev in new if (a := ev.source_agent)})
    run.model = model[:200]
    run.status = _run_status(last, False, last_turn)
    run.started_at = min([*stamps, run.started_at] if run.started_at else stamps)
    run.ended_at = max([*stamps, run.ended_at] if run.ended_at else stamps)
    if not agg["steps"]:
        return False  # no step at all: the whole-run projection decides the status (see `Run`)
    run.turns = agg["turns"]
    run.steps = agg["steps"] or 0
    run.events += len(new)
    run.prompt_tokens = agg["prompt_tokens"] or 0
    run.completion_tokens = agg["completion_tokens"] or 0
    run.tokens = agg["tokens"] or 0
    run.tool_calls += sum(1 for ev in new if ev.event_type == "tool_call")
    run.errors += sum(1 for ev in new if ev.event_type == "error")
    run.primitives += sum(by_primitive.values())
    run.recall_count += by_primitive.get("recall", 0)
    run.pin_count += by_primitive.get("pin", 0)
    run.unpin_count += by_primitive.get("unpin", 0)
    run.peak_utilization = agg["peak_utilization"]
    run.updated_at = timezone.now()
    _update_runs([run])
    return True


def _delete_turns(run: Run, by_agent: dict[str, list[int]], in_dirty: Q, pin_agents: set[str]) -> None:
    """Delete the projection rows of the touched turns (`by_agent`: agent → turn numbers) and the pins of
    `pin_agents`. PostgreSQL: one statement (data-modifying CTEs; the foreign keys are deferred to the
    commit, so children and parents may go together). Elsewhere: one DELETE per table."""
    if connection.vendor == "postgresql":
        qn = connection.ops.quote_name
        pairs = [(a, t) for a, ts in by_agent.items() for t in ts]
        agents, turns = [a for a, _ in pairs], [t for _, t in pairs]
        touched = "(agent, {col}) IN (SELECT * FROM unnest(%s::text[], %s::int[]))"
        parts: list[str] = []
        params: list[Any] = []
        for model, col in ((ContextDecision, "turn_number"), (PrimitiveEvent, "turn_number"), (Step, "turn_number"), (Turn, "number")):  # fmt: skip
            parts.append(
                f"DELETE FROM {qn(model._meta.db_table)} WHERE run_id = %s AND {touched.format(col=col)}"
            )
            params += [run.pk, agents, turns]
        if pin_agents:
            parts.append(
                f"DELETE FROM {qn(Pin._meta.db_table)} WHERE run_id = %s AND agent = ANY(%s::text[])"
            )
            params += [run.pk, sorted(pin_agents)]
        sql = "WITH " + ", ".join(f"d{i} AS ({p})" for i, p in enumerate(parts[:-1])) + " " + parts[-1]
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
        return
    for m in (ContextDecision, PrimitiveEvent, Step):
        qs = m.objects.filter(run=run).filter(in_dirty)
        qs._raw_delete(qs.db)
    qs = Turn.objects.filter(run=run).filter(
        reduce(operator.or_, (Q(agent=a, number__in=ts) for a, ts in by_agent.items()))
    )
    qs._raw_delete(qs.db)
    if pin_agents:
        qs = Pin.objects.filter(run=run, agent__in=pin_agents)
        qs._raw_delete(qs.db)


@dataclass
class _RunSummary:
    models: Counter[str]  # steps per non-empty model, over the whole run
    turns: dict[str, Any]  # turns, steps, prompt_tokens, completion_tokens, tokens, peak_utilization
    last: TraceEvent  # the run's last event (`_sort_key`)
    last_turn: TraceEvent | None  # its last `turn` event


def _run_summary(
    project: Project, run: Run, last_new: TraceEvent, last_new_turn: TraceEvent | None
) -> _RunSummary:
    """The whole-run facts the turn-by-turn path needs after writing, in ONE query (a UNION ALL): the
    steps per model, the sums over the turns, and the candidates for the last event and the last `turn`
    event — the stored events at or after the batch's last (turn) event, which bounds the search; with
    no `turn` event in the batch, the `turn` events at the latest `turn` timestamp. Ties on the
    timestamp are broken in Python, as `project_run` does (the database's collation may order step ids
    differently)."""
    qn = connection.ops.quote_name
    step_t, turn_t, event_t = (qn(m._meta.db_table) for m in (Step, Turn, Event))
    nul = "CAST(NULL AS bigint)"
    in_run = "project_id = %s AND run_id = %s"
    at = connection.ops.adapt_datetimefield_value
    if last_new_turn is not None:
        turn_where, turn_params = "timestamp >= %s", [at(last_new_turn.timestamp_dt)]
    else:
        turn_where = (
            f"timestamp = (SELECT MAX(timestamp) FROM {event_t} WHERE {in_run} AND event_type = 'turn')"
        )
        turn_params = [project.pk, run.run_id]
    sql = f"""
        SELECT 'm', model, COUNT(*), {nul}, {nul}, {nul}, {nul}, CAST(NULL AS double precision)
          FROM {step_t} WHERE run_id = %s AND model <> '' GROUP BY model
        UNION ALL
        SELECT 'a', NULL, COUNT(*), CAST(SUM(steps) AS bigint), CAST(SUM(prompt_tokens) AS bigint),
               CAST(SUM(completion_tokens) AS bigint), CAST(SUM(tokens) AS bigint), MAX(peak_utilization)
          FROM {turn_t} WHERE run_id = %s
        UNION ALL
        SELECT 'e', raw, {nul}, {nul}, {nul}, {nul}, {nul}, CAST(NULL AS double precision)
          FROM {event_t} WHERE {in_run} AND timestamp >= %s
        UNION ALL
        SELECT 't', raw, {nul}, {nul}, {nul}, {nul}, {nul}, CAST(NULL AS double precision)
          FROM {event_t} WHERE {in_run} AND event_type = 'turn' AND {turn_where}
    """  # noqa: S608  (table names are ours; values are parameters)
    params = [
        run.pk,
        run.pk,
        project.pk,
        run.run_id,
        at(last_new.timestamp_dt),
        project.pk,
        run.run_id,
        *turn_params,
    ]
    counts: Counter[str] = Counter()
    turns: dict[str, Any] = {}
    last: list[TraceEvent] = []
    last_turn: list[TraceEvent] = []
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        for kind, text, n, steps, prompt, completion, tokens, peak in cursor.fetchall():
            if kind == "m":
                counts[text] = int(n)
            elif kind == "a":
                turns = {"turns": int(n), "steps": steps, "prompt_tokens": prompt, "completion_tokens": completion,
                         "tokens": tokens, "peak_utilization": peak}  # fmt: skip
            elif kind == "e":
                last.append(_parse_stored(text))
            else:
                last_turn.append(_parse_stored(text))
    return _RunSummary(
        counts, turns, max(last, key=_sort_key), max(last_turn, key=_sort_key) if last_turn else None
    )


def _project_pins(
    project: Project, run: Run, agents: set[str], in_dirty: Q, dirty_views: list[TurnView]
) -> list[dict[str, Any]]:
    """The pin rows of `agents` (all their pins): `pin_lifetimes` over the touched turns' views and, for
    the other turns, their stored pin/unpin calls (and, only when a pin has no token count, the
    working sets that rendered a pin)."""
    events = Event.objects.filter(project=project, run_id=run.run_id)
    ids = list(
        PrimitiveEvent.objects.filter(run=run, agent__in=agents, primitive__in=("pin", "unpin"))
        .exclude(in_dirty)
        .values_list("event_step_id", flat=True)
    )
    stored = (
        [_parse_stored(raw) for raw in events.filter(step_id__in=ids).values_list("raw", flat=True)]
        if ids
        else []
    )
    mine = [tv for tv in dirty_views if (tv.agent or "") in agents]

    def lifetimes(extra: list[TraceEvent]) -> list[PinLifetime]:
        views = build_steps(normalize_events(sorted(extra, key=_sort_key))) + mine
        views.sort(key=lambda tv: (tv.agent or "", tv.turn))
        return pin_lifetimes(views)

    pins = lifetimes(stored)
    if any(p.tokens is None for p in pins):
        rendered = set(
            ContextDecision.objects.filter(run=run, agent__in=agents, pinned_count__gt=0)
            .exclude(in_dirty)
            .values_list("agent", "turn_number")
        )
        if rendered:
            stored += [
                _parse_stored(raw)
                for agent, turn, raw in events.filter(
                    event_type="context_decision", turn__in=sorted({t for _, t in rendered})
                ).values_list("agent", "turn", "raw")
                if (agent, turn) in rendered
            ]
            pins = lifetimes(stored)
    return [_pin_row(p) for p in pins]


def do_write_projections(
    runs: list[Run], events_of: dict[int, list[TraceEvent]], *, replace: list[int]
) -> None:
    """Replace the projection rows of `runs` with ones computed from `events_of[run.pk]`.

    Must run inside a transaction holding the runs' row locks. `replace` names the runs that may have
    projection rows already (they are deleted first); the others are known to have none."""
    if replace:
        # Children first; `_raw_delete` is one DELETE per table with no collector round trips, which is
        # safe because nothing else points at these rows and they have no signals.
        for model in (ContextDecision, PrimitiveEvent, Pin, Step, Turn):
            qs = model.objects.filter(run_id__in=replace)
            qs._raw_delete(qs.db)
    projections = [project_run(events_of[run.pk]) for run in runs]
    now = timezone.now()
    for run, proj in zip(runs, projections, strict=True):
        for key, value in proj.run_fields.items():
            setattr(run, key, value)
        run.updated_at = now
    _update_runs(runs)
    _insert_projections(list(zip(runs, projections, strict=True)))


def _insert_projections(items: list[tuple[Run, _Projection]]) -> None:
    """Insert the turn, step, decision, primitive and pin rows of each (run, projection)."""
    turns: list[dict[str, Any]] = []
    for run, proj in items:
        for t in proj.turns:
            t["run_id"] = run.pk
            turns.append(t)
    n_steps = sum(len(proj.steps) for _, proj in items)
    # PostgreSQL: the ids of both tables from their sequences in one round trip, before the COPYs.
    ids = _allocate_ids([(Turn, len(turns)), (Step, n_steps)]) if connection.vendor == "postgresql" else None
    turn_ids = fast_insert(Turn, turns, need_ids=True, ids=ids[0] if ids else None)
    steps: list[dict[str, Any]] = []
    base = 0
    for run, proj in items:
        for t_index, step in proj.steps:
            step["run_id"] = run.pk
            step["turn_id"] = turn_ids[base + t_index]
            steps.append(step)
        base += len(proj.turns)
    step_ids = fast_insert(Step, steps, need_ids=True, ids=ids[1] if ids else None)
    decisions: list[dict[str, Any]] = []
    primitives: list[dict[str, Any]] = []
    pins: list[dict[str, Any]] = []
    base = 0
    for run, proj in items:
        for s_index, decision in proj.decisions:
            decision["run_id"] = run.pk
            decision["step_id"] = step_ids[base + s_index]
            decisions.append(decision)
        for s_index_or_none, prim in proj.primitives:
            prim["run_id"] = run.pk
            prim["step_id"] = step_ids[base + s_index_or_none] if s_index_or_none is not None else None
            primitives.append(prim)
        for pin in proj.pins:
            pin["run_id"] = run.pk
            pins.append(pin)
        base += len(proj.steps)
    fast_insert(ContextDecision, decisions)
    fast_insert(PrimitiveEvent, primitives)
    fast_insert(Pin, pins)


def _update_runs(runs: list[Run]) -> None:
    """Write the projected counters of `runs` (one UPDATE per run, sent as one executemany)."""
    if not runs:
        return
    fields = [Run._meta.get_field(name) for name in _RUN_FIELDS]
    sets = ", ".join(f"{connection.ops.quote_name(f.column)} = %s" for f in fields)
    sql = f"UPDATE {connection.ops.quote_name(Run._meta.db_table)} SET {sets} WHERE id = %s"
    params = [
        [f.get_db_prep_save(getattr(run, f.attname), connection) for f in fields] + [run.pk] for run in runs
    ]
    with connection.cursor() as cursor:
        cursor.executemany(sql, params)


@functools.cache
def _columns(model: type[models.Model]) -> tuple[tuple[str, ...], tuple[str, ...], tuple[bool, ...]]:
    """(attnames, columns, is_json) of a model's non-primary-key concrete fields."""
    fields = [f for f in model._meta.concrete_fields if not f.primary_key]
    return (
        tuple(f.attname for f in fields),
        tuple(f.column for f in fields),
        tuple(isinstance(f, models.JSONField) for f in fields),
    )


def _allocate_ids(wanted: list[tuple[type[models.Model], int]]) -> list[list[int]]:
    """PostgreSQL: `n` new primary keys from each model's sequence, all in one query."""
    cols = [
        "ARRAY(SELECT nextval(pg_get_serial_sequence(%s, %s)) FROM generate_series(1, %s))" for _ in wanted
    ]
    params: list[Any] = []
    for model, n in wanted:
        params += [model._meta.db_table, model._meta.pk.column, n]
    with connection.cursor() as cursor:
        cursor.execute("SELECT " + ", ".join(cols), params)
        row = cursor.fetchone()
    return [list(ids) for ids in row]


def fast_insert(
    model: type[models.Model],
    rows: list[dict[str, Any]],
    *,
    need_ids: bool = False,
    ids: list[int] | None = None,
) -> list[int]:
    """Insert row dicts (every non-pk attname of `model`) in bulk: PostgreSQL COPY, elsewhere
    `bulk_create`. With `need_ids`, returns the new primary keys in row order (on PostgreSQL taken
    from the table's sequence in one query, before the COPY, unless `ids` gives them already, from
    `_allocate_ids`); otherwise returns [].

    Why COPY of plain tuples: Django's bulk_create on PostgreSQL sends every column as an array
    parameter, and psycopg's Python-level array quoting of large JSON text took most of the ingest
    time; building a model instance per row cost as much again (measured with bench/ingest.py).
    Model defaults and `save()` are bypassed: callers give complete rows.
    """
    if not rows:
        return []
    attnames, columns, json_cols = _columns(model)
    if connection.vendor != "postgresql":
        objs = [model(**row) for row in rows]
        model.objects.bulk_create(objs, batch_size=500)
        return [obj.pk for obj in objs] if need_ids else []
    meta = model._meta
    with connection.cursor() as cursor:
        if need_ids:
            if ids is None:
                ids = _allocate_ids([(model, len(rows))])[0]
            columns = (meta.pk.column, *columns)
        column_sql = ", ".join(connection.ops.quote_name(c) for c in columns)
        json_names = [a for a, j in zip(attnames, json_cols, strict=True) if j]
        with cursor.cursor.copy(
            f"COPY {connection.ops.quote_name(meta.db_table)} ({column_sql}) FROM STDIN"
        ) as cp:
            lines: list[str] = []
            for i, row in enumerate(rows):
                for name in json_names:
                    row[name] = _json_text(row[name])
                values = [row[a] for a in attnames]
                if need_ids:
                    values.insert(0, ids[i])
                lines.append(_copy_line(values))
            cp.write("".join(lines))
    return ids if need_ids and ids is not None else []


_EVENT_COLUMNS = (
    "project_id",
    "run_id",
    "step_id",
    "parent_step_id",
    "event_type",
    "agent",
    "timestamp",
    "raw",
    "received_at",
    "turn",
)


def _insert_events(rows: list[tuple[Any, ...]]) -> None:
    """Write raw event rows (tuples in `_EVENT_COLUMNS` order): COPY on PostgreSQL, else bulk_create."""
    if not rows:
        return
    if connection.vendor != "postgresql":
        Event.objects.bulk_create(
            [Event(**dict(zip(_EVENT_COLUMNS, r, strict=True))) for r in rows], batch_size=500
        )
        return
    columns = ", ".join(connection.ops.quote_name(c) for c in _EVENT_COLUMNS)
    with connection.cursor() as cursor, cursor.cursor.copy(f"COPY traces_event ({columns}) FROM STDIN") as cp:
        cp.write(_event_copy_text(rows))


def _event_copy_text(rows: list[tuple[Any, ...]]) -> str:
    """`_copy_line` of every raw event row, with the column types known (the same text, about half
    the time: no per-cell dispatch, and `received_at` is the same for the whole batch)."""
    esc, null = _copy_text, "\\N"
    received: dict[datetime, str] = {}
    out: list[str] = []
    for project_id, rid, sid, parent, kind, agent, ts, raw, recv, turn in rows:
        r = received.get(recv)
        if r is None:
            r = received[recv] = recv.isoformat()
        out.append(
            f"{project_id}\t{esc(rid)}\t{esc(sid)}\t{null if parent is None else esc(parent)}\t{esc(kind)}\t"
            f"{esc(agent)}\t{ts.isoformat()}\t{esc(raw)}\t{r}\t{null if turn is None else turn}\n"
        )
    return "".join(out)


def _copy_text(v: str) -> str:
    if "\\" in v or "\n" in v or "\r" in v or "\t" in v:
        return v.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    return v


def _copy_cell(v: Any) -> str:
    """One value in COPY's text format. Why not psycopg's `write_row`: it cost ~11 µs a row in Python,
    the largest single item of a batch's write (bench/ingest.py); this is a few µs."""
    cls = v.__class__
    if cls is str:
        if "\\" in v or "\n" in v or "\r" in v or "\t" in v:
            return v.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
        return v
    if v is None:
        return "\\N"
    if cls is int:
        return str(v)
    if cls is bool:
        return "t" if v else "f"
    if cls is datetime:
        return v.isoformat()
    if cls is float:
        if v != v:
            return "NaN"
        if v in (float("inf"), float("-inf")):
            return "Infinity" if v > 0 else "-Infinity"
        return repr(v)
    return _copy_cell(str(v))


def _copy_line(values: Iterable[Any]) -> str:
    return "\t".join([_copy_cell(v) for v in values]) + "\n"


def _json_text(value: Any) -> str | None:
    return None if value is None else _dumps(value)


_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


# --------------------------------------------------------------------------------------------------
# JSONL files (uploads and import_traces)


@dataclass(frozen=True)
class LineError:
    line: int
    error: str

    def to_dict(self) -> dict[str, Any]:
        return {"line": self.line, "error": self.error}


@dataclass
class JsonlResult:
    """Totals of one file. `line_errors` are capped at `MAX_LINE_ERRORS` (the counts are not)."""

    lines: int = 0
    accepted: int = 0
    duplicates: int = 0
    rejected: int = 0
    line_errors: list[LineError] = field(default_factory=list)
    runs: set[str] = field(default_factory=set)

    def add_error(self, line: int, error: str) -> None:
        self.rejected += 1
        if len(self.line_errors) < MAX_LINE_ERRORS:
            self.line_errors.append(LineError(line, error))


MAX_LINE_ERRORS = 1000


def max_line_bytes() -> int:
    """The longest JSONL line accepted: one event may not exceed the API batch limit."""
    return int(settings.ARCANA_MAX_INGEST_BYTES)


def open_jsonl(fh: IO[bytes], *, name: str = "") -> IO[bytes]:
    """Wrap `fh` in a gzip reader when the file is gzip (by magic bytes, whatever its name)."""
    head = fh.read(2)
    fh.seek(0)
    if head == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=fh, mode="rb")  # type: ignore[return-value]
    return fh


def iter_jsonl(
    fh: IO[bytes], *, limit: int | None = None
) -> Iterator[tuple[int, Any, str | None, str | None]]:
    """Yield `(line, value, raw_text, error)` for every non-blank line of a JSONL stream.

    `line` is 1-based. On a good line `value` is the decoded JSON and `error` None; on a bad one
    `value` is None and `error` says why. A UTF-8 BOM on line 1 and CRLF endings are accepted. A line
    longer than `limit` bytes is skipped without being held in memory. A stream that cannot be read
    further (a truncated gzip) yields one error at the line where reading stopped, then ends.
    """
    limit = limit or max_line_bytes()
    number = 0
    while True:
        try:
            raw = fh.readline(limit + 1)
        except (EOFError, OSError, zlib.error) as exc:
            yield number + 1, None, None, f"cannot read further: {_read_error(exc)}"
            return
        if not raw:
            return
        number += 1
        if len(raw) > limit and not raw.endswith(b"\n"):
            # Skip the rest of an oversized line in bounded reads.
            try:
                while True:
                    more = fh.readline(1 << 20)
                    if not more or more.endswith(b"\n"):
                        break
            except (EOFError, OSError, zlib.error) as exc:
                yield number, None, None, f"line is longer than the {limit:,}-byte limit for one event"
                yield number + 1, None, None, f"cannot read further: {_read_error(exc)}"
                return
            yield number, None, None, f"line is longer than the {limit:,}-byte limit for one event"
            continue
        text, error = decode_jsonl_line(number, raw)
        if error is not None:
            yield number, None, None, error
        if text is None:
            continue
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            yield number, None, None, f"not valid JSON: {exc.msg} at column {exc.colno}"
            continue
        yield number, value, text, None


def _read_error(exc: BaseException) -> str:
    if isinstance(exc, EOFError):
        return "the compressed file ended before its end-of-stream marker (truncated gzip)"
    return str(exc) or type(exc).__name__


def count_lines(fh: IO[bytes]) -> int:
    """The number of lines in a (possibly gzip) stream, reading what can be read."""
    n = 0
    last = b"\n"
    try:
        while chunk := fh.read(1 << 20):
            n += chunk.count(b"\n")
            last = chunk[-1:]
    except (EOFError, OSError, zlib.error):
        pass
    return n + (0 if last == b"\n" else 1)


def ingest_jsonl(
    project: Project,
    fh: IO[bytes],
    *,
    source: Source,
    chunk_lines: int = 500,
    skip_lines: int = 0,
    on_chunk: Callable[[int, JsonlResult], bool | None] | None = None,
) -> JsonlResult:
    """Ingest a JSONL stream in chunks of `chunk_lines` lines, one `ingest_events` call per chunk.

    A bad line is a line error and never costs the good lines around it. `skip_lines` resumes after
    a cursor (lines before it are not re-read into the database). `on_chunk(last_line, totals)` runs
    after each chunk is committed; returning True stops early (the caller re-queues with a cursor)."""
    total = JsonlResult()
    buf: list[Any] = []
    texts: list[str | None] = []
    lines: list[int] = []
    last_line = 0
    since_flush = 0

    def flush() -> bool:
        if buf:
            res = ingest_events(project, buf, source=source, raw_texts=texts)
            total.accepted += res.accepted
            total.duplicates += res.duplicates
            total.runs.update(res.runs)
            for r in res.results:
                if r.status == "rejected":
                    total.add_error(lines[r.index], r.error or "rejected")
            buf.clear()
            texts.clear()
            lines.clear()
        total.lines = last_line
        return bool(on_chunk(last_line, total)) if on_chunk is not None else False

    for number, value, text, error in iter_jsonl(fh):
        last_line = max(last_line, number)
        if number <= skip_lines:
            continue
        if error is not None:
            total.add_error(number, error)
        else:
            buf.append(value)
            texts.append(text)
            lines.append(number)
        since_flush += 1
        # Flush on lines read, not only on good lines, so progress moves through a run of bad lines.
        if since_flush >= chunk_lines:
            since_flush = 0
            if flush():
                return total
    flush()
    return total


def read_body(data: bytes, *, gzip_encoded: bool, limit: int) -> bytes:
    """Decode a request body; raises `BodyTooLarge` when the decoded size exceeds `limit` bytes
    (a gzip bomb is refused while decompressing, never truncated) and `ValueError` for bad gzip."""
    if not gzip_encoded:
        if len(data) > limit:
            raise BodyTooLarge(limit)
        return data
    out = io.BytesIO()
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        chunk = d.decompress(data, limit + 1)
        out.write(chunk)
        if out.tell() > limit or d.unconsumed_tail:
            raise BodyTooLarge(limit)
        out.write(d.flush())
    except zlib.error as exc:
        raise ValueError(f"body is not valid gzip: {exc}") from None
    if not d.eof:
        raise ValueError("body is not valid gzip: the compressed data ended early (truncated)")
    if out.tell() > limit:
        raise BodyTooLarge(limit)
    return out.getvalue()


class BodyTooLarge(Exception):
    def __init__(self, limit: int) -> None:
        super().__init__(f"body is larger than the {limit:,}-byte limit")
        self.limit = limit


def iter_chunks(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    chunk: list[Any] = []
    for item in items:
        chunk.append(item)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
