"""When a batch of spans only appends model calls to a run, the run's events of its earlier steps
stand: only the new steps' events are written (`traces.ingest.spans`). Anything else derives the
run again whole from its raw spans, which stay the source of truth.

A run's new spans *append* when all of these hold (`appended_steps`):

1. every span of the run, stored and new, is a model call under no other model call, and none was
   exported by our runtime (`arcana.*`): there are no agents, tool spans, hand-offs or recorded steps
   whose reading a later span may change;
2. every new span is new to the spans (never derived into another run) and starts after every stored
   span of the run started, and its step comes after every stored step: the steps and turns already
   written keep their numbers, positions and neighbours;
3. no new step's input answers (`tool_call_response`) a tool call an earlier step asked for: that
   answer would be the earlier step's tool result.

The one reading of a stored step that later calls may still change is its reconstructed context
decision (an instruction lost at that step and restored later is lost no more): each stored step's
`context_decision` event is compared with the one derived now (`decisions_agree`), and any
difference derives the run again whole.
"""

from __future__ import annotations

from typing import Any

import msgspec

from runtime.otlp import NormalizedSpan, OtlpRun
from traces.models import Event, Project, Span


def step_id_of_span(trace_id: str, span_id: str) -> str:
    """The step id a model call span's step gets (`runtime.otlp` names steps by their span)."""
    return f"otlp-{trace_id}-{span_id}"


def appended_steps(
    run: OtlpRun, spans: list[NormalizedSpan], rows: list[Span], run_id: str
) -> set[str] | None:
    """The step ids of the run's new spans when they only append model calls (module docstring,
    conditions 1–3), else None (the run is derived again whole). `rows` are the stored rows of
    `spans`, in the same order; a row is new to the run when its `run_id` is not `run_id` yet."""
    old_start = None
    new_keys: set[tuple[str, str]] = set()
    for s, row in zip(spans, rows, strict=True):
        if s["kind"] != "model_call" or s["arcana"] is not None:
            return None  # 1.
        if row.run_id == run_id:
            old_start = s["start_time"] if old_start is None else max(old_start, s["start_time"])
        elif row.run_id:
            return None  # 2. moved here from another run
        else:
            new_keys.add((s["trace_id"], s["span_id"]))
    if old_start is None or not new_keys:
        return None
    if run["agents"] or run["handoffs"] or run["unattached_tool_calls"]:
        return None
    new_steps: set[str] = set()
    old_calls: set[str] = set()
    seen_new = False
    for step in run["steps"]:
        if step["nested_in"] is not None:
            return None  # 1.
        if (step["trace_id"], step["span_id"]) in new_keys:
            seen_new = True
            if step["start_time"] <= old_start:
                return None  # 2.
            new_steps.add(step_id_of_span(step["trace_id"], step["span_id"]))
            if old_calls and _answers(step["input_messages"], old_calls):
                return None  # 3.
        elif seen_new:
            return None  # 2. a stored step after a new one
        else:
            old_calls.update(c["call_id"] or "" for c in step["tool_calls"])
    return new_steps


def _answers(messages: Any, calls: set[str]) -> bool:
    for message in messages or []:
        for part in message.get("parts") or []:
            if part.get("type") == "tool_call_response" and part.get("id") in calls:
                return True
    return False


def stored_decisions(project: Project, run_ids: list[str]) -> dict[str, dict[str, str]]:
    """The stored `context_decision` events of these runs as stored (their JSON text), by run id and
    step id."""
    out: dict[str, dict[str, str]] = {r: {} for r in run_ids}
    if not run_ids:
        return out
    rows = Event.objects.filter(
        project=project, run_id__in=run_ids, event_type="context_decision"
    ).values_list("run_id", "step_id", "raw")
    for run_id, step_id, raw in rows.iterator(chunk_size=2000):
        out[run_id][step_id] = raw
    return out


def decisions_agree(events: list[dict[str, Any]], new_steps: set[str], stored: dict[str, str]) -> bool:
    """Whether the `context_decision` events derived now for the run's stored steps are the ones
    stored (`stored`: the run's, by step id), no more and no fewer. Compared as the JSON text
    stored (`event_text`)."""
    count = 0
    for ev in events:
        if ev["event_type"] != "context_decision" or ev["parent_step_id"] in new_steps:
            continue
        count += 1
        if stored.get(ev["step_id"]) != event_text(ev):
            return False
    return count == len(stored)


_ENCODER = msgspec.json.Encoder()


def event_text(event: dict[str, Any]) -> str | None:
    """The JSON text a derived event is stored as (compact, UTF-8 as it is; msgspec, several times
    faster than `json.dumps`), or None for a value it cannot write (an integer past 64 bits): then
    `ingest_events` writes it, or refuses it with its reason."""
    try:
        return _ENCODER.encode(event).decode()
    except (TypeError, OverflowError, msgspec.EncodeError):
        return None


def events_of_steps(events: list[dict[str, Any]], steps: set[str]) -> list[dict[str, Any]]:
    """The events of these steps: a step's `turn` event has the step's id, its other events have it
    as their parent."""
    return [
        ev
        for ev in events
        if ev["step_id"] in steps or (ev["event_type"] != "turn" and ev["parent_step_id"] in steps)
    ]
