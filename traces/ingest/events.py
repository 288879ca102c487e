"""What every stage reads of one trace event: its own turn, its place in a run's order, a stored row.

Shared by the stages (storing writes `Event.turn`, projecting and the turn-by-turn path read it); no
database access, no stage of its own.
"""

from __future__ import annotations

import json
from datetime import datetime

from runtime import TraceEvent
from runtime.facts import ANNOTATION_EVENT_TYPES, our_position


def local_turn(ev: TraceEvent) -> int | None:
    """The turn of one of our runtime's events (`runtime.facts.our_position`, fixed whatever else
    arrives), else None.

    Such an event belongs to turn (agent, turn) on its own; Arcana events find their turn through
    other events, so runs holding any are always projected whole."""
    turn, _ = our_position(ev)
    return turn if turn is not None and 0 <= turn < 2**31 else None


def parse_stored(raw: str) -> TraceEvent:
    """A stored raw event parsed again (it was validated when stored)."""
    return TraceEvent.from_dict(json.loads(raw))


def sort_key(ev: TraceEvent) -> tuple[datetime, str]:
    """A run's canonical order: by time, then step id (`projection.project_run` sorts by it)."""
    return (ev.timestamp_dt, ev.step_id)


def is_local_batch(events: list[TraceEvent]) -> bool:
    """True when every event of a run's batch has its own turn and none stops the run on an error: the
    batch may be projected turn by turn (`traces.ingest.incremental`) when its run allows it. A batch
    with a score event goes the whole-run way (its run's last event must not be the score)."""
    return all(
        local_turn(ev) is not None
        and ev.stop_reason != "error"
        and ev.event_type not in ANNOTATION_EVENT_TYPES
        for ev in events
    )
