"""Which turn, step and agent an event belongs to, for both producers; a step's model; a run's links.

Numbering (DESIGN.md §1): turns and steps are 1-based. Our runtime writes `metadata.turn` /
`metadata.step` on every event of a step. For arcana-agent 1.2 files each LLM iteration is a turn
(`turn.metadata.step + 1`), every turn has one step, and an event finds its turn through
`parent_step_id` (the id of its step's `turn` event).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .._trace import PRODUCER, TraceEvent, new_object
from ._scores import ANNOTATION_EVENT_TYPES
from ._values import as_int

T = TypeVar("T")

#: The producer name given to events without `metadata.producer` (arcana-agent 1.2).
ARCANA_PRODUCER = "arcana-1.2"


def producer_of(ev: TraceEvent) -> str:
    """`"arcana-console"` for an event of our runtime, `"arcana-1.2"` for any other."""
    return PRODUCER if ev.is_ours else ARCANA_PRODUCER


@dataclass(frozen=True)
class NormalizedEvent:
    """One event with the numbering both producers share.

    `index` is the 1-based position in the input (file order). `turn`/`step` are 1-based, or None
    for events outside any step (`history_seeded`, unknown types with no link). `step_key` identifies
    the step (the `step_id` of its `turn` event when known); `agent` is the pool agent or None.
    """

    index: int
    event: TraceEvent
    turn: int | None
    step: int | None
    agent: str | None
    step_key: str | None
    producer: str

    @property
    def event_type(self) -> str:
        return self.event.event_type


def _normalized(
    index: int,
    event: TraceEvent,
    turn: int | None,
    step: int | None,
    agent: str | None,
    step_key: str | None,
    producer: str,
) -> NormalizedEvent:
    """`NormalizedEvent(...)` without the frozen dataclass's `__init__`, which sets each of the seven
    fields through `object.__setattr__`: 0.26 against 0.73 us here, once per event of every
    projection (`normalize_events`). The same object: equal, frozen, of the same class."""
    ne = new_object(NormalizedEvent)
    fields = ne.__dict__
    fields["index"] = index
    fields["event"] = event
    fields["turn"] = turn
    fields["step"] = step
    fields["agent"] = agent
    fields["step_key"] = step_key
    fields["producer"] = producer
    return ne


@dataclass
class StepView:
    """One LLM call and what surrounds it: decision, snapshot, `turn` event, tool/primitive/LLM calls."""

    agent: str | None
    turn: int
    step: int
    step_id: str | None = None
    context_decision: TraceEvent | None = None
    prompt_snapshot: TraceEvent | None = None
    turn_event: TraceEvent | None = None
    tool_calls: list[TraceEvent] = field(default_factory=list)
    primitive_calls: list[TraceEvent] = field(default_factory=list)
    llm_calls: list[TraceEvent] = field(default_factory=list)
    errors: list[TraceEvent] = field(default_factory=list)
    other: list[TraceEvent] = field(default_factory=list)
    events: list[NormalizedEvent] = field(default_factory=list)

    def remembered(self, name: str, compute: Callable[[StepView], list[T]]) -> list[T]:
        """`compute(self)` worked out once and kept on the view while its events stay the same (a step
        row, its errors, its turn's and its run's outcome all ask); a fresh list is returned."""
        memo = self.__dict__.get(name)
        if memo is None or memo[0] != len(self.events):
            memo = (len(self.events), compute(self))
            self.__dict__[name] = memo
        return list(memo[1])


@dataclass
class TurnView:
    """The steps of one turn of one agent, in order."""

    agent: str | None
    turn: int
    steps: list[StepView] = field(default_factory=list)


int_or_none = as_int  # the name the modules of this package use


def our_position(ev: TraceEvent) -> tuple[int | None, int | None]:
    """(turn, step) of an event of our runtime, 1-based: `metadata.console_turn` / `console_step`, or in
    files written before those keys existed `metadata.turn` / `step` (which now hold arcana-agent 1.2's
    0-based iteration on `context_decision`, `prompt_snapshot` and `turn` events). (None, None) for an
    event outside any step or not ours.

    Kept on the event once worked out (as `timestamp_dt` is): a projection asks it of every event two
    or three times (normalising, grouping, the stored turn column), and events are not changed once
    made."""
    cached = ev.__dict__.get("_our_position")
    if cached is not None:
        return cached  # type: ignore[no-any-return]
    position: tuple[int | None, int | None]
    if not ev.is_ours:
        position = (None, None)
    else:
        md = ev.metadata
        if "console_turn" in md:
            position = (int_or_none(md.get("console_turn")), int_or_none(md.get("console_step")))
        else:
            position = (int_or_none(md.get("turn")), int_or_none(md.get("step")))
    ev.__dict__["_our_position"] = position
    return position


def normalize_events(events: Iterable[TraceEvent]) -> list[NormalizedEvent]:
    """Give every event its 1-based turn, step and agent, keeping the input order.

    1. Ours (`metadata.producer == "arcana-console"`): `our_position`.
    2. `turn` events of Arcana 1.2: turn = `metadata.step + 1` (0-based iteration), step 1.
    3. Other Arcana events: the turn event their `parent_step_id` names; failing that (a send that
       died before its first turn event) `metadata.turn + 1` of a context decision / prompt snapshot.
    4. Arcana's summarizer `llm_call` (parent null) belongs to the step whose decision follows it.
    Score events (`ANNOTATION_EVENT_TYPES`) annotate the run and are left out.
    The agent is the event's `source_agent`, else its step's (Arcana drops it on per-agent tool calls).
    """
    items = [ev for ev in events if ev.event_type not in ANNOTATION_EVENT_TYPES]  # not part of a step
    # step id of each turn event -> (turn, step, agent)
    spine: dict[str, tuple[int, int, str | None]] = {}
    for ev in items:
        if ev.event_type != "turn":
            continue
        if ev.is_ours:
            turn, step = our_position(ev)
            if turn is not None:
                spine[ev.step_id] = (turn, step or 1, ev.source_agent)
        else:
            iteration = int_or_none(ev.metadata.get("step"))
            if iteration is not None:
                spine[ev.step_id] = (iteration + 1, 1, ev.source_agent)

    out: list[NormalizedEvent] = []
    pending: list[int] = []  # positions in `out` waiting for the next step (summarizer llm_call)
    for i, ev in enumerate(items, start=1):
        ours = ev.is_ours
        producer = PRODUCER if ours else ARCANA_PRODUCER
        turn = step = None  # int | None, as in the loop above
        agent = ev.source_agent
        key: str | None = None
        position = our_position(ev) if ours else None
        if position is not None and position[0] is not None:
            turn, step = position
            step = step or 1
            key = ev.step_id if ev.event_type == "turn" else ev.parent_step_id
            if key is None or (key not in spine and ev.event_type != "turn"):
                key = f"{agent or ''}#{turn}.{step}"
        elif ev.event_type == "turn" and ev.step_id in spine:
            turn, step, _ = spine[ev.step_id]
            key = ev.step_id
        elif ev.parent_step_id is not None and ev.parent_step_id in spine:
            turn, step, spine_agent = spine[ev.parent_step_id]
            agent = agent or spine_agent
            key = ev.parent_step_id
        elif ev.event_type in ("context_decision", "prompt_snapshot"):
            iteration = int_or_none(ev.metadata.get("turn"))
            if iteration is not None:
                turn, step = iteration + 1, 1
                key = ev.parent_step_id or f"{agent or ''}#{turn}.1"
        normalized = _normalized(i, ev, turn, step, agent, key, producer)
        if turn is None and ev.event_type == "llm_call" and not ours:
            pending.append(len(out))
        elif turn is not None and pending:
            for pos in pending:
                prev = out[pos]
                out[pos] = _normalized(
                    prev.index, prev.event, turn, step, prev.agent or agent, key, prev.producer
                )
            pending = []
        out.append(normalized)
    # Our keys for events of a step are the turn event's id when it is known; make them uniform so a
    # step whose events point at its turn event and one keyed by number are the same step.
    by_number: dict[tuple[str | None, int, int], str] = {}
    for ne in out:
        if ne.event.event_type == "turn" and ne.turn is not None and ne.step is not None:
            by_number.setdefault((ne.agent, ne.turn, ne.step), ne.event.step_id)
    fixed: list[NormalizedEvent] = []
    for ne in out:
        if ne.turn is not None and ne.step is not None:
            real = by_number.get((ne.agent, ne.turn, ne.step))
            if real is not None and ne.step_key != real:
                ne = _normalized(ne.index, ne.event, ne.turn, ne.step, ne.agent, real, ne.producer)
        fixed.append(ne)
    return fixed


def build_steps(normalized: Iterable[NormalizedEvent], agent: str | None = None) -> list[TurnView]:
    """Group normalised events into turns and steps, ordered by (agent, turn, step) of first appearance.

    `agent=None` keeps every agent; otherwise only that agent's events.
    """
    steps: dict[tuple[str | None, int, int], StepView] = {}
    for ne in normalized:
        if ne.turn is None or ne.step is None:
            continue
        if agent is not None and ne.agent != agent:
            continue
        k = (ne.agent, ne.turn, ne.step)
        sv = steps.get(k)
        if sv is None:
            sv = steps[k] = StepView(agent=ne.agent, turn=ne.turn, step=ne.step)
        ev = ne.event
        sv.events.append(ne)
        kind = ev.event_type
        if kind == "turn":
            sv.turn_event = sv.turn_event or ev
            sv.step_id = ev.step_id
        elif kind == "context_decision" and sv.context_decision is None:
            sv.context_decision = ev
        elif kind == "prompt_snapshot" and sv.prompt_snapshot is None:
            sv.prompt_snapshot = ev
        elif kind == "tool_call":
            sv.tool_calls.append(ev)
        elif kind == "cognitive_primitive":
            sv.primitive_calls.append(ev)
        elif kind == "llm_call":
            sv.llm_calls.append(ev)
        elif kind == "error":
            sv.errors.append(ev)
        else:
            sv.other.append(ev)
        # Synthetic keys (no turn event known) contain "#"; real ones are the turn event's step_id.
        if sv.step_id is None and ne.step_key and "#" not in ne.step_key:
            sv.step_id = ne.step_key
    agents_order: list[str | None] = []
    for k in steps:
        if k[0] not in agents_order:
            agents_order.append(k[0])
    turns: dict[tuple[str | None, int], TurnView] = {}
    for k in sorted(steps, key=lambda k: (agents_order.index(k[0]), k[1], k[2])):
        tv = turns.get((k[0], k[1]))
        if tv is None:
            tv = turns[(k[0], k[1])] = TurnView(agent=k[0], turn=k[1])
        tv.steps.append(steps[k])
    return list(turns.values())


# --------------------------------------------------------------------------------------------------
# A step's model


def step_model(sv: StepView) -> str | None:
    """The model that answered the step: the `turn` event's envelope `model` (ours), else its prompt
    snapshot's (envelope, then `prompt_snapshot.model`; arcana-agent 1.2 leaves `turn.model` null),
    else the model of the step's own chat `llm_call` (ours; Arcana's `llm_call`s are summarizer calls,
    whose model is not the step's). None when the trace does not say."""
    for ev in (sv.turn_event, sv.prompt_snapshot):
        if ev is not None and ev.model:
            return ev.model
    if sv.prompt_snapshot is not None:
        snap = sv.prompt_snapshot.metadata.get("prompt_snapshot")
        model = snap.get("model") if isinstance(snap, dict) else None
        if isinstance(model, str) and model:
            return model
    for ev in sv.llm_calls:
        if ev.is_ours and ev.metadata.get("purpose") != "summarize" and ev.model:
            return ev.model
    return None


# --------------------------------------------------------------------------------------------------
# Bundles and delegation


@dataclass(frozen=True)
class RunLinks:
    """How a run relates to others: the sub-agent bundle it belongs to (`metadata.bundle_id`), the run
    that delegated it (`metadata.delegated_by_run_id`) and the agent that ran it (`source_agent`).

    arcana-agent 1.2's sub-agent service stamps `bundle_id` on every event of every run of a bundle and
    `delegated_by_run_id` on every event of a delegated ask; like its `TraceReader.list_bundles`, the
    first value met in the run's events is the run's."""

    bundle_id: str | None = None
    delegated_by_run_id: str | None = None
    agent: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "bundle_id": self.bundle_id,
            "delegated_by_run_id": self.delegated_by_run_id,
            "agent": self.agent,
        }


def run_links(events: Iterable[TraceEvent]) -> RunLinks:
    """The run's bundle, delegating run and agent (see `RunLinks`); None for each the events do not carry."""
    found: dict[str, str] = {}
    for ev in events:
        md = ev.metadata
        if "bundle_id" not in md and "delegated_by_run_id" not in md and "source_agent" not in md:
            continue  # most events carry none of them: three look-ups instead of three calls
        for key in ("bundle_id", "delegated_by_run_id", "source_agent"):
            value = ev.metadata.get(key)
            if key not in found and isinstance(value, str) and value:
                found[key] = value
        if len(found) == 3:
            break
    return RunLinks(found.get("bundle_id"), found.get("delegated_by_run_id"), found.get("source_agent"))
