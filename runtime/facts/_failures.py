"""Errors and failures: what went wrong in a step, whether a send (turn) or a run failed, and why.

One rule for both producers, so a run's error count and a send's outcome read the same in the CLI,
the read API and the pages:

* **errors of a step** (`step_errors`): every failed tool call (a `tool_call` whose record has an
  `error`), every unknown tool (our `error` event naming the call; for arcana-agent 1.2, which writes
  nothing for it, a call the model asked for that no event answers), every other `error` event
  (provider failures, failed summary calls), and — arcana-agent 1.2 only — a step whose model never
  answered (a `context_decision` with no `turn` event: the provider call failed and Arcana wrote no
  error, its §1.1 / §7.14).
* **a failed send**: its last step ended it in failure — an `error` event with `stop_reason "error"`
  (ours), an Arcana step with no answer, or an assessment saying `failed`.
* **a cancelled run**: its last event carries `stop_reason "user_cancelled"` (`CANCELLED_STOP`): the
  runtime's `state_change` when a session was stopped after a step, or the one a server writes when it
  cancels a conversation between turns. Not `completed`, although its last answer may be final.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from .._trace import TraceEvent
from ._events import StepView, TurnView
from ._outcomes import tool_results
from ._scores import ANNOTATION_EVENT_TYPES
from ._values import as_dict

#: Why an arcana-agent 1.2 step with a context decision and no `turn` event failed.
NO_ANSWER = (
    "no model answer: the send ended before the model answered "
    "(arcana-agent 1.2 writes no error event when the provider call fails)"
)


#: The `stop_reason` of an event that ends a run because someone cancelled it.
CANCELLED_STOP = "user_cancelled"

_dict = as_dict


@dataclass(frozen=True)
class StepError:
    """One thing that went wrong in a step. `kind`: "tool" (a tool raised), "unknown_tool", "unrecorded"
    (an Arcana call no event answers), "no_answer" (Arcana: the model never answered), "error" (any
    other `error` event: provider failure, failed summary). `ends_send` is True when it ended the send."""

    kind: str
    message: str
    name: str | None = None
    ends_send: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "message": self.message, "name": self.name, "ends_send": self.ends_send}


#: (timestamp, step_id): the run's canonical order; attrgetter keys a sort at C speed.
_time_order = attrgetter("timestamp_dt", "step_id")


def error_message(ev: TraceEvent) -> str:
    """The one-line text of an `error` event: `<error>: <message>` (either part may be missing)."""
    md = ev.metadata
    head = md.get("error") or md.get("error_category") or "error"
    message = md.get("message") or ev.stop_detail or ""
    return f"{head}: {message}".rstrip(": ") if message != head else str(head)


def _unanswered(sv: StepView) -> bool:
    return sv.turn_event is None and sv.context_decision is not None and not sv.context_decision.is_ours


def step_errors(sv: StepView) -> list[StepError]:
    """Everything that went wrong in the step (see the module docstring), in this order: tool results
    (in the order the model asked), then other `error` events, then a missing answer.

    Kept on the view while its events stay the same, like `tool_results` (the step row, its turn's
    outcome and its run's outcome each ask for it)."""
    return sv.remembered("_step_errors", _step_errors)


def _step_errors(sv: StepView) -> list[StepError]:
    out: list[StepError] = []
    for r in tool_results(sv):
        if r["ok"]:
            continue
        kind = (
            "tool" if r["event"] == "tool_call" else "unknown_tool" if r["event"] == "error" else "unrecorded"
        )
        out.append(StepError(kind, str(r["error"] or "error"), r["name"]))
    for ev in sv.errors:
        if isinstance(ev.metadata.get("tool_call_id"), str):
            continue  # an unknown tool: listed with the tool results
        out.append(StepError("error", error_message(ev), None, ev.stop_reason == "error"))
    if _unanswered(sv):
        out.append(StepError("no_answer", NO_ANSWER, None, True))
    return out


def step_failure(sv: StepView) -> str | None:
    """Why the step ended its send in failure, or None: an error that stopped it (ours), no model answer
    (Arcana), or an assessment that says `failed` (the model's answer was empty)."""
    for e in step_errors(sv):
        if e.ends_send:
            return e.message
    assessment = _dict(sv.turn_event.metadata.get("assessment")) if sv.turn_event is not None else {}
    if assessment.get("failed") is True:
        return f"the runtime judged the answer failed ({assessment.get('completion_reason') or 'no reason given'})"
    return None


@dataclass(frozen=True)
class SendOutcome:
    """How a send (a turn, or a whole run) ended: `status` is "completed", "failed", "continued" (a turn
    whose last answer asked for tools: an arcana-agent 1.2 iteration, the send went on in the next
    turn), "running" (no final answer yet: a live run, or a trace that stops mid-send) or, for a run,
    "cancelled" (`CANCELLED_STOP`); `reason` says why it failed or was cancelled; `errors` counts the
    `StepError`s."""

    status: str
    reason: str | None = None
    errors: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "reason": self.reason, "errors": self.errors}


def _answer_status(turn_event: TraceEvent | None) -> str | None:
    if turn_event is None:
        return None
    md = turn_event.metadata
    assessment, facts = _dict(md.get("assessment")), _dict(md.get("facts"))
    if assessment.get("failed") is True:
        return "failed"
    if assessment.get("completed") is True:
        return "completed"
    if facts.get("finish_reason") == "stop" and not facts.get("tool_calls"):
        return "completed"
    return None


#: Event types that belong to a step (docs/trace-format.md). A run holding none of them (an Arcana 1.2
#: session file: `history_seeded` only) will never have a step.
STEP_EVENT_TYPES = frozenset(
    {"turn", "context_decision", "prompt_snapshot", "llm_call", "tool_call", "cognitive_primitive", "error"}
)


def status_from_last(last: TraceEvent, last_turn: TraceEvent | None) -> str:
    """A run's status from its last event and its last `turn` event, when no step failed: "cancelled"
    when the last event says so (`CANCELLED_STOP`), "completed" when that answer is final or the last
    event carries another `stop_reason`, else "running"."""
    if last.stop_reason == CANCELLED_STOP:
        return "cancelled"
    if _answer_status(last_turn) == "failed":
        return "failed"
    if _answer_status(last_turn) == "completed" or last.stop_reason:
        return "completed"
    return "running"


#: (timestamp, index) of a normalised event: when it happened, ties broken by file order.
_event_end = attrgetter("event.timestamp_dt", "index")


def _step_end(sv: StepView) -> tuple[Any, int]:
    """(timestamp, index) of the step's last event. Kept on the view while its events stay the same:
    its turn's outcome and its run's outcome both ask, for every step."""
    memo = sv.__dict__.get("_step_end")
    if memo is None or memo[0] != len(sv.events):
        memo = sv.__dict__["_step_end"] = (len(sv.events), max(map(_event_end, sv.events)))
    return memo[1]


def turn_outcome(tv: TurnView) -> SendOutcome:
    """How the turn's send ended: failed when its last step failed (`step_failure`), completed when that
    step's answer is final (assessment `completed`, or `finish_reason "stop"` with no tool calls)."""
    errors = sum(len(step_errors(sv)) for sv in tv.steps)
    if not tv.steps:
        return SendOutcome("running", None, errors)
    last = max(tv.steps, key=_step_end)
    reason = step_failure(last)
    if reason is not None:
        return SendOutcome("failed", reason, errors)
    status = _answer_status(last.turn_event)
    if status == "completed":
        return SendOutcome("completed", None, errors)
    if last.turn_event is not None and last.turn_event.stop_reason:
        return SendOutcome("completed", None, errors)
    facts = _dict(last.turn_event.metadata.get("facts")) if last.turn_event is not None else {}
    if facts.get("tool_calls"):
        return SendOutcome("continued", None, errors)
    return SendOutcome("running", None, errors)


def run_outcome(turns: Iterable[TurnView], events: Iterable[TraceEvent]) -> SendOutcome:
    """How the run ended, from its last step (by time) and its events:

    1. an `error` event with `stop_reason "error"` anywhere → failed with its message;
    2. the last event has `stop_reason "user_cancelled"` → cancelled, its `stop_detail` as the reason;
    3. the last step failed (`step_failure`) → failed with that reason;
    4. the last step's answer is final → completed; the last event has a `stop_reason` → completed;
    5. no event of `STEP_EVENT_TYPES` at all (an Arcana session file: `history_seeded` only) → completed;
    6. otherwise → running.
    Score events (`ANNOTATION_EVENT_TYPES`) are not part of the run: a run scored later ends as before.
    `errors` counts every `StepError` of the run plus `error` events outside any step."""
    turn_list = list(turns)
    evs = sorted((e for e in events if e.event_type not in ANNOTATION_EVENT_TYPES), key=_time_order)
    steps = [sv for tv in turn_list for sv in tv.steps]
    in_steps = {id(ne.event) for sv in steps for ne in sv.events}
    loose = [e for e in evs if e.event_type == "error" and id(e) not in in_steps]
    errors = sum(len(step_errors(sv)) for sv in steps) + len(loose)
    stop = next((e for e in evs if e.event_type == "error" and e.stop_reason == "error"), None)
    if stop is not None:
        return SendOutcome("failed", error_message(stop), errors)
    if evs and evs[-1].stop_reason == CANCELLED_STOP:
        return SendOutcome("cancelled", evs[-1].stop_detail or "cancelled", errors)
    if not steps:
        done = bool(evs) and not any(e.event_type in STEP_EVENT_TYPES for e in evs)
        return SendOutcome("completed" if done else "running", None, errors)
    last = max(steps, key=_step_end)
    reason = step_failure(last)
    if reason is not None:
        return SendOutcome("failed", reason, errors)
    last_turn = max(
        (sv.turn_event for sv in steps if sv.turn_event is not None),
        key=lambda e: (e.timestamp_dt, e.step_id),
        default=None,
    )
    return SendOutcome(status_from_last(evs[-1], last_turn), None, errors)
