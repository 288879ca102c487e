"""A run's counters after a turn-by-turn batch (`update_counters`), and `Run.tally`, the running totals
they are counted from. Part of stage 4 (project): `incremental` calls it, `projecting` writes the tally
of a run projected whole (`whole_run_tally`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from django.db import connection
from django.db.models import Max
from django.utils import timezone

from runtime import TraceEvent
from runtime.facts import CANCELLED_STOP, RunLabels, run_labels, status_from_last
from traces.core import prepared
from traces.ingest.events import parse_stored, sort_key
from traces.ingest.projection import Projection, primitive_counts, top_model
from traces.models import Event, Project, Run, Step, Turn


def update_counters(
    project: Project, run: Run, new: list[TraceEvent], proj: Projection, removed: Removed
) -> bool:
    """The run's counters after the batch. With a valid `Run.tally`, each is the stored value plus
    what the batch added minus what the replaced rows held (no read of the rest of the run); without
    one (the first batch after a whole-run projection), the aggregates of `_run_summary`, which then
    start the tally. False when a whole-run fact is at stake (the caller then projects the run whole)."""
    tally = Tally.load(run)
    if tally is None:
        new_turns = [ev for ev in new if ev.event_type == "turn"]
        summary = _run_summary(
            project, run, max(new, key=sort_key), max(new_turns, key=sort_key) if new_turns else None
        )
        tally = Tally.of(summary)
        agg = summary.turns
        totals = {k: agg[k] or 0 for k in SUMS}
        turns, peak = agg["turns"], agg["peak_utilization"]
    else:
        tally.add(new, proj, removed)
        totals = {k: getattr(run, k) + sum(t[k] for t in proj.turns) - removed.sums[k] for k in SUMS}
        turns = run.turns + len(proj.turns) - removed.turns
        peak = _peak_after(run, proj, removed)
    # The run's model: the most used over all steps (a tie is left to the whole-run projection, which
    # breaks it by step order).
    model = top_model(tally.models)
    if model is None:
        return False  # the rows written above are replaced by the caller's whole-run projection
    by_primitive = primitive_counts(new)
    stamps = [ev.timestamp_dt for ev in new]
    run.agents = sorted(set(run.agents) | {a for ev in new if (a := ev.source_agent)})
    run.model = model[:200]
    run.status = tally.status()
    if run.status in (Run.Status.FAILED, Run.Status.CANCELLED):
        return False  # the reason of a failed or cancelled run is a whole-run fact (`run_outcome`)
    if any(
        ("run_name" in ev.metadata or "run_tags" in ev.metadata)
        and run_labels([ev]) != RunLabels(run.name, list(run.tags or []))
        for ev in new
    ):
        return False  # a run's name and tags are its first event's (`runtime.facts.run_labels`)
    for key, value in (("bundle_id", run.bundle_id), ("delegated_by_run_id", run.delegated_by_run_id)):
        if any(ev.metadata.get(key, value or None) != (value or None) for ev in new):
            return False  # a run's links are its first event's (`runtime.facts.run_links`): whole run
    run.started_at = min([*stamps, run.started_at] if run.started_at else stamps)
    run.ended_at = max([*stamps, run.ended_at] if run.ended_at else stamps)
    if not totals["steps"]:
        return False  # no step at all: the whole-run projection decides the status (see `Run`)
    run.turns = turns
    for name, total in totals.items():
        setattr(run, name, total)  # `errors` too: every event of such a run belongs to a turn
    run.events += len(new)
    run.primitives += sum(by_primitive.values())
    run.recall_count += by_primitive.get("recall", 0)
    run.pin_count += by_primitive.get("pin", 0)
    run.unpin_count += by_primitive.get("unpin", 0)
    run.peak_utilization = peak
    run.updated_at = timezone.now()
    run.tally = tally.dump(run.updated_at)
    return True


#: The run's counters that are sums over its turn rows.
SUMS = ("steps", "prompt_tokens", "completion_tokens", "tokens", "tool_calls", "errors")


def _peak_after(run: Run, proj: Projection, removed: Removed) -> float | None:
    """The run's peak utilization after the touched turns are replaced: the stored peak and the new
    rows' peaks, unless a replaced row held the stored peak and no new row reaches it (then the other
    rows' peak is read: one query, only in that case)."""
    added = [p for t in proj.turns if (p := t["peak_utilization"]) is not None]
    top = max(added) if added else None
    stored = run.peak_utilization
    if stored is None or (top is not None and top >= stored):
        return top if top is not None else stored
    if stored in removed.peaks:
        # The rows left after the delete (the new ones are not inserted yet), and the new ones.
        left = Turn.objects.filter(run=run).aggregate(m=Max("peak_utilization"))["m"]
        return max((p for p in (left, top) if p is not None), default=None)
    return stored


@dataclass
class Removed:
    """What the replaced turn and step rows of a batch held (to take out of the run's running totals)."""

    turns: int = 0
    sums: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SUMS, 0))
    peaks: set[float] = field(default_factory=set)
    models: Counter[str] = field(default_factory=Counter)

    def add_turn(self, values: dict[str, Any]) -> None:
        self.turns += 1
        for k in SUMS:
            self.sums[k] += values[k]
        if values["peak_utilization"] is not None:
            self.peaks.add(values["peak_utilization"])


def whole_run_tally(events: list[TraceEvent], proj: Projection, at: datetime) -> dict[str, Any] | None:
    """`Run.tally` of a run projected whole from all its `events` (valid while its `updated_at` is
    `at`): the run's next live batch then counts from it, instead of aggregating the run's rows first
    (a run of mix (a) spans two batches: its second one did)."""
    if not events:
        return None
    last = max(events, key=sort_key)
    turns = [ev for ev in events if ev.event_type == "turn"]
    lt = max(turns, key=sort_key) if turns else None
    return Tally.starting(Counter(m for _, step in proj.steps if (m := step["model"])), last, lt).dump(at)


def _last_entry(ev: TraceEvent) -> tuple[datetime, str, bool | str]:
    """`Tally.last` for the run's last event: its sort key and its stop reason (False without one;
    tallies stored before it was kept hold True)."""
    return (ev.timestamp_dt, ev.step_id, ev.stop_reason or False)


def _turn_entry(ev: TraceEvent) -> tuple[datetime, str, str]:
    """`Tally.last_turn` for the run's last `turn` event: its sort key and its answer."""
    return (ev.timestamp_dt, ev.step_id, _answer(ev))


def _answer(turn_event: TraceEvent) -> str:
    """What a `turn` event's answer says of the run's status (`status_from_last` without the last
    event's stop reason): "failed", "completed" or "running"."""
    return status_from_last(replace(turn_event, stop_reason=None), turn_event)


@dataclass
class Tally:
    """`Run.tally` in memory: the steps per model over the run, and the run's last event and last `turn`
    event as their sort key (`sort_key`) and what `status_from_last` reads of them (the last event's
    stop reason; the last turn's answer, `_answer`)."""

    models: Counter[str]
    last: tuple[datetime, str, bool | str]
    last_turn: tuple[datetime, str, str] | None

    @classmethod
    def load(cls, run: Run) -> Tally | None:
        """The run's stored tally; None when there is none or a whole-run projection came after it."""
        t = run.tally
        if not isinstance(t, dict) or datetime.fromisoformat(t["at"]) != run.updated_at:
            return None
        lt = t["last_turn"]
        return cls(
            Counter(t["models"]),
            (datetime.fromisoformat(t["last"][0]), t["last"][1], t["last"][2]),
            (datetime.fromisoformat(lt[0]), lt[1], lt[2]) if lt else None,
        )

    @classmethod
    def of(cls, summary: _RunSummary) -> Tally:
        return cls.starting(Counter(summary.models), summary.last, summary.last_turn)

    @classmethod
    def starting(cls, models: Counter[str], last: TraceEvent, last_turn: TraceEvent | None) -> Tally:
        """The tally of a run whose steps per model, last event and last `turn` event are these."""
        return cls(models, _last_entry(last), _turn_entry(last_turn) if last_turn is not None else None)

    def add(self, new: list[TraceEvent], proj: Projection, removed: Removed) -> None:
        """Take the batch in: its steps' models (less the replaced steps'), its last events."""
        self.models.update(m for _, step in proj.steps if (m := step["model"]))
        self.models.subtract(removed.models)
        self.models = +self.models  # drop models no step uses any more
        last = max(new, key=sort_key)
        if sort_key(last) > self.last[:2]:
            self.last = _last_entry(last)
        turns = [ev for ev in new if ev.event_type == "turn"]
        if turns:
            lt = max(turns, key=sort_key)
            if self.last_turn is None or sort_key(lt) > self.last_turn[:2]:
                self.last_turn = _turn_entry(lt)

    def status(self) -> str:
        """`status_from_last` of the run's last event and last `turn` event."""
        if self.last[2] == CANCELLED_STOP:
            return Run.Status.CANCELLED
        answer = self.last_turn[2] if self.last_turn is not None else Run.Status.RUNNING
        if answer == Run.Status.FAILED:
            return Run.Status.FAILED
        if answer == Run.Status.COMPLETED or self.last[2]:
            return Run.Status.COMPLETED
        return Run.Status.RUNNING

    def dump(self, at: datetime) -> dict[str, Any]:
        """The JSON of `Run.tally`, valid while the run's `updated_at` is `at`."""
        lt = self.last_turn
        return {
            "at": at.isoformat(),
            "models": dict(self.models),
            "last": [self.last[0].isoformat(), self.last[1], self.last[2]],
            "last_turn": [lt[0].isoformat(), lt[1], lt[2]] if lt is not None else None,
        }


TURN_VALUES = (*SUMS, "peak_utilization")


@dataclass
class _RunSummary:
    models: Counter[str]  # steps per non-empty model, over the whole run
    turns: dict[
        str, Any
    ]  # turns, steps, prompt/completion/total tokens, peak_utilization, tool_calls, errors
    last: TraceEvent  # the run's last event (`sort_key`)
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
    turn_params: list[Any]
    if last_new_turn is not None:
        turn_where, turn_params = "timestamp >= %s", [at(last_new_turn.timestamp_dt)]
    else:
        turn_where = (
            f"timestamp = (SELECT MAX(timestamp) FROM {event_t} WHERE {in_run} AND event_type = 'turn')"
        )
        turn_params = [project.pk, run.run_id]
    sql = f"""
        SELECT 'm', model, COUNT(*), {nul}, {nul}, {nul}, {nul}, CAST(NULL AS double precision), {nul}, {nul}
          FROM {step_t} WHERE run_id = %s AND model <> '' GROUP BY model
        UNION ALL
        SELECT 'a', NULL, COUNT(*), CAST(SUM(steps) AS bigint), CAST(SUM(prompt_tokens) AS bigint),
               CAST(SUM(completion_tokens) AS bigint), CAST(SUM(tokens) AS bigint), MAX(peak_utilization),
               CAST(SUM(tool_calls) AS bigint), CAST(SUM(errors) AS bigint)
          FROM {turn_t} WHERE run_id = %s
        UNION ALL
        SELECT 'e', raw, {nul}, {nul}, {nul}, {nul}, {nul}, CAST(NULL AS double precision), {nul}, {nul}
          FROM {event_t} WHERE {in_run} AND timestamp >= %s AND event_type <> 'score'
        UNION ALL
        SELECT 't', raw, {nul}, {nul}, {nul}, {nul}, {nul}, CAST(NULL AS double precision), {nul}, {nul}
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
    with prepared.cursor() as cursor:
        cursor.execute(sql, params)
        for kind, text, n, steps, prompt, completion, tokens, peak, tool_calls, errors in cursor.fetchall():
            if kind == "m":
                counts[text] = int(n)
            elif kind == "a":
                turns = {"turns": int(n), "steps": steps, "prompt_tokens": prompt, "completion_tokens": completion,
                         "tokens": tokens, "peak_utilization": peak, "tool_calls": tool_calls,
                         "errors": errors}  # fmt: skip
            elif kind == "e":
                last.append(parse_stored(text))
            else:
                last_turn.append(parse_stored(text))
    return _RunSummary(
        counts, turns, max(last, key=sort_key), max(last_turn, key=sort_key) if last_turn else None
    )
