"""Trace facts: what the events of a trace mean, worked out once for every view.

The CLI (`arcana trace …`), the server's ingestion (and so the read API and the pages) all take their
reading of a trace from here, for files of our runtime and of arcana-agent 1.2 alike
(`docs/trace-format.md` is the contract). Everything is pure: events in, facts out. These names are
imported from `runtime.facts` only (not from `runtime`), and carry it as their module.

    >>> from runtime.facts import normalize_events, build_steps, turn_outcome, pin_lifetimes
    >>> turns = build_steps(normalize_events(events))      # turns → steps, 1-based, per agent
    >>> turn_outcome(turns[-1])                            # SendOutcome(status="failed", reason=…, errors=2)
    >>> [p.pin_id for p in pin_lifetimes(turns) if p.is_active_at(3)]

Where each fact lives:

| fact | names | module |
|---|---|---|
| turn / step / agent of an event; steps and turns | `normalize_events`, `our_position`, `build_steps`, `NormalizedEvent`, `StepView`, `TurnView`, `producer_of` | `_events` |
| a step's model | `step_model` | `_events` |
| bundles and delegation | `run_links`, `RunLinks` | `_events` |
| a run's name and tags (`metadata.run_name` / `run_tags`) and their one rule | `run_labels`, `RunLabels`, `clean_name`, `clean_tags`, `bad_tags`, `NAME_MAX`, `TAGS_MAX`, `TAG_RE` | `_labels` |
| pin lifetimes; the active rule (during a turn, after it); Arcana's rendered rule and its one wording | `pin_lifetimes`, `PinLifetime`, `pin_active_at`, `pin_active_after`, `active_pins`, `arcana_renders_pin`, `rendered_pins`, `lingering_pins`, `ARCANA_PIN_RENDERING` | `_pins` |
| where a pinned block was and which pin it is | `pinned_blocks`, `PinnedBlock`, `is_pinned_row` | `_pins` |
| primitive outcomes and their one wording | `primitive_outcome`, `event_primitive_outcome`, `PrimitiveOutcome` | `_outcomes` |
| tool results; calls no event answers | `tool_results`, `ToolResult`, `unrecorded_calls`, `UNRECORDED_CALL`, `tool_event_outcome` | `_outcomes` |
| decision counts | `decision_counts`, `DecisionCounts` | `_outcomes` |
| reading a field tolerantly (wrong type = missing) | `as_dict`, `as_list`, `as_str`, `as_int`, `as_number` | `_values` |
| score events (`chat.score`): their one rule and reading; annotations left out of a run's facts | `score_problem`, `score_fact`, `ScoreFact`, `event_position`, `is_annotation`, `ANNOTATION_EVENT_TYPES`, `SCORE_EVENT`, `SCORE_TARGETS`, `SCORE_NAME_RE`, `SCORE_LABEL_MAX`, `SCORE_COMMENT_MAX` | `_scores` |
| errors; failed steps, sends and runs; cancelled runs | `step_errors`, `StepError`, `step_failure`, `turn_outcome`, `run_outcome`, `SendOutcome`, `CANCELLED_STOP` | `_failures` |
"""

from __future__ import annotations

from .._public import publish as _publish
from ._events import (
    ARCANA_PRODUCER,
    NormalizedEvent,
    RunLinks,
    StepView,
    TurnView,
    build_steps,
    normalize_events,
    our_position,
    producer_of,
    run_links,
    step_model,
)
from ._failures import (
    CANCELLED_STOP,
    NO_ANSWER,
    STEP_EVENT_TYPES,
    SendOutcome,
    StepError,
    error_message,
    run_outcome,
    status_from_last,
    step_errors,
    step_failure,
    turn_outcome,
)
from ._labels import NAME_MAX, TAG_RE, TAGS_MAX, RunLabels, bad_tags, clean_name, clean_tags, run_labels
from ._outcomes import (
    UNRECORDED_CALL,
    DecisionCounts,
    PrimitiveOutcome,
    ToolResult,
    decision_counts,
    event_primitive_outcome,
    primitive_outcome,
    requested_calls,
    tool_event_outcome,
    tool_results,
    unrecorded_calls,
)
from ._pins import (
    ARCANA_PIN_RENDERING,
    PinLifetime,
    PinLike,
    PinnedBlock,
    active_pins,
    arcana_renders_pin,
    decision_rows,
    is_pinned_row,
    lingering_pins,
    pin_active_after,
    pin_active_at,
    pin_lifetimes,
    pinned_blocks,
    rendered_pins,
)
from ._scores import (
    ANNOTATION_EVENT_TYPES,
    SCORE_COMMENT_MAX,
    SCORE_EVENT,
    SCORE_LABEL_MAX,
    SCORE_NAME_RE,
    SCORE_TARGETS,
    ScoreFact,
    event_position,
    is_annotation,
    score_fact,
    score_problem,
)
from ._values import as_dict, as_int, as_list, as_number, as_str

__all__ = [
    "ANNOTATION_EVENT_TYPES",
    "SCORE_COMMENT_MAX",
    "SCORE_EVENT",
    "SCORE_LABEL_MAX",
    "SCORE_NAME_RE",
    "SCORE_TARGETS",
    "ScoreFact",
    "event_position",
    "is_annotation",
    "score_fact",
    "score_problem",
    "ARCANA_PIN_RENDERING",
    "ARCANA_PRODUCER",
    "NAME_MAX",
    "TAGS_MAX",
    "TAG_RE",
    "RunLabels",
    "bad_tags",
    "clean_name",
    "clean_tags",
    "run_labels",
    "CANCELLED_STOP",
    "NO_ANSWER",
    "STEP_EVENT_TYPES",
    "UNRECORDED_CALL",
    "DecisionCounts",
    "NormalizedEvent",
    "PinLifetime",
    "PinLike",
    "PinnedBlock",
    "PrimitiveOutcome",
    "RunLinks",
    "SendOutcome",
    "StepError",
    "StepView",
    "ToolResult",
    "TurnView",
    "active_pins",
    "arcana_renders_pin",
    "as_dict",
    "as_int",
    "as_list",
    "as_number",
    "as_str",
    "build_steps",
    "decision_counts",
    "decision_rows",
    "error_message",
    "event_primitive_outcome",
    "is_pinned_row",
    "lingering_pins",
    "normalize_events",
    "our_position",
    "pin_active_after",
    "pin_active_at",
    "pin_lifetimes",
    "pinned_blocks",
    "primitive_outcome",
    "producer_of",
    "rendered_pins",
    "requested_calls",
    "run_links",
    "run_outcome",
    "status_from_last",
    "step_errors",
    "step_failure",
    "step_model",
    "tool_event_outcome",
    "tool_results",
    "turn_outcome",
    "unrecorded_calls",
]

# Reprs, tracebacks and pickles name this module, not the private one (runtime/_public.py).
_publish(globals())
