"""What a step's calls came to: primitive outcomes (and their one wording), tool results, tool calls
that left no event, and what a context decision did to the messages."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, TypedDict

from .._trace import TraceEvent
from ._events import StepView, int_or_none
from ._pins import is_pinned_row
from ._values import as_dict, as_list, as_str

_dict, _list, _str = as_dict, as_list, as_str


def _count(value: Any) -> str:
    n = int_or_none(value)
    return "?" if n is None else str(n)


# --------------------------------------------------------------------------------------------------
# Primitive calls


@dataclass(frozen=True)
class PrimitiveOutcome:
    """What one `recall` / `pin` / `unpin` call came to. `ok` is False when it did not do what was asked
    (an error result, `pinned: false`, `unpinned: false`, `found: false`). `summary` is the one wording
    every view uses (`line` prefixes the primitive):

        recall turn=3 → 2 messages            recall turn=999 → turn out of range: 999, max=4
        pin pin_id=p_1a2b3c4d label='facts'   pin pin_id=p_1a2b3c4d label='facts' already pinned
        pin REJECTED pin_budget_exceeded (3200+800 > 4000)
        unpin pin_id=p_1a2b3c4d ok            unpin pin_id=p_00000000 unknown id
        recall REJECTED invalid_arguments: <detail>
    """

    primitive: str
    ok: bool
    summary: str

    @property
    def line(self) -> str:
        return f"{self.primitive} {self.summary}".rstrip()


def primitive_outcome(primitive: Any, args: Any, result: Any) -> PrimitiveOutcome:
    """The outcome of a primitive call from its name, arguments and structured result (see
    `PrimitiveOutcome`). Tolerant: odd or missing values give "?" rather than an exception."""
    prim = _str(primitive) or "?"
    a, r = _dict(args), _dict(result)
    if not isinstance(result, dict):
        return PrimitiveOutcome(prim, False, "no result recorded")
    if r.get("error"):
        detail = r.get("detail")
        text = f"REJECTED {r['error']}" + (f": {detail}" if detail else "")
        return PrimitiveOutcome(prim, False, text)
    if prim == "recall":
        include = a.get("include")
        head = f"turn={r.get('turn', a.get('turn'))}" + (
            f" include={include}" if include and include != "all" else ""
        )
        if r.get("found") is True:
            n = len(_list(r.get("messages")))
            return PrimitiveOutcome(prim, True, f"{head} → {n} message{'s' if n != 1 else ''}")
        return PrimitiveOutcome(prim, False, f"{head} → {r.get('note') or 'not found'}")
    if prim == "pin":
        if r.get("pinned") is True:
            text = f"pin_id={r.get('pin_id')} label={r.get('label')!r}"
            if r.get("until_turn") is not None:
                text += f" until_turn={r.get('until_turn')}"
            if r.get("already_pinned") is True:
                text += " already pinned"
            return PrimitiveOutcome(prim, True, text)
        reason = r.get("reason") or "not pinned"
        text = f"REJECTED {reason}"
        if reason == "pin_budget_exceeded":
            text += (
                f" ({_count(r.get('current_pin_tokens'))}+{_count(r.get('requested_tokens'))}"
                f" > {_count(r.get('cap'))})"
            )
        return PrimitiveOutcome(prim, False, text)
    if prim == "unpin":
        pin_id = r.get("pin_id", a.get("pin_id"))
        if r.get("unpinned") is True:
            return PrimitiveOutcome(prim, True, f"pin_id={pin_id} ok")
        note = r.get("note")
        text = f"pin_id={pin_id} unknown id"
        if isinstance(note, str) and not note.startswith("unknown pin_id"):
            text += f" ({note})"
        return PrimitiveOutcome(prim, False, text)
    return PrimitiveOutcome(prim, True, json.dumps(r, ensure_ascii=False)[:200])


def event_primitive_outcome(ev: TraceEvent) -> PrimitiveOutcome:
    """`primitive_outcome` of a `cognitive_primitive` event."""
    md = ev.metadata
    return primitive_outcome(md.get("primitive"), md.get("args"), md.get("result"))


# --------------------------------------------------------------------------------------------------
# Tool results


class ToolResult(TypedDict):
    """One tool call of a step and what came of it. `recorded` is False when the producer kept no
    result body (arcana-agent 1.2 stores digests only); `event` is "tool_call", "error" (an unknown
    tool, ours) or None (a call that left no event: arcana-agent 1.2 writes none for a tool that is
    not registered)."""

    tool_call_id: str | None
    name: str
    arguments: Any
    result: Any
    recorded: bool
    error: str | None
    error_category: str | None
    duration_ms: int | None
    side_effect: str | None
    args_digest: str | None
    result_digest: str | None
    ok: bool
    event: str | None


#: The one wording for a tool call the model made that no event answers.
UNRECORDED_CALL = "no event recorded (arcana-agent 1.2 writes none for a tool that is not registered)"


def requested_calls(sv: StepView) -> list[dict[str, Any]]:
    """The tool calls the step's model asked for (`turn.metadata.facts.tool_calls`), primitives included."""
    facts = _dict(sv.turn_event.metadata.get("facts")) if sv.turn_event is not None else {}
    return [tc for tc in _list(facts.get("tool_calls")) if isinstance(tc, dict)]


def _error_text(error: Any) -> str | None:
    if error is None or error == "":
        return None
    return error if isinstance(error, str) else json.dumps(error, ensure_ascii=False)


def _result(
    *,
    tool_call_id: str | None,
    name: str,
    arguments: Any,
    result: Any = None,
    recorded: bool,
    error: str | None,
    error_category: str | None = None,
    duration_ms: int | None = None,
    side_effect: str | None = None,
    args_digest: str | None = None,
    result_digest: str | None = None,
    ok: bool,
    event: str | None,
) -> ToolResult:
    # Written out, in `ToolResult`'s key order (a projected step's JSON keeps it): once per tool call
    # of every projected step, a third of the time of filling `dict.fromkeys(...)`.
    return {
        "tool_call_id": tool_call_id,
        "name": name,
        "arguments": arguments,
        "result": result,
        "recorded": recorded,
        "error": error,
        "error_category": error_category,
        "duration_ms": duration_ms,
        "side_effect": side_effect,
        "args_digest": args_digest,
        "result_digest": result_digest,
        "ok": ok,
        "event": event,
    }


def tool_results(sv: StepView) -> list[ToolResult]:
    """The step's tool calls and their results, in the order the model asked for them (then event order).

    Sources: `tool_call` events (the envelope record gives name, error, duration, digests; ours add
    `metadata.tool_call_id/arguments/result`, so `recorded` is True); our `error` events naming a
    `tool_call_id` (an unknown tool: `result` is what the model was told); and every call the model
    asked for that no `tool_call` / `cognitive_primitive` / `error` event answers (`event: None`,
    `error: UNRECORDED_CALL`). Our events name the call they answer (`tool_call_id`); arcana-agent
    1.2's do not, so there calls are matched by name. Primitive calls are not listed here.

    Worked out once per step view (its step row, its errors, its turn's and its run's outcome all ask):
    the answer is kept on the view while its events stay the same (a fresh list is returned)."""
    return sv.remembered("_tool_results", _tool_results)


def _tool_results(sv: StepView) -> list[ToolResult]:
    asked = requested_calls(sv)
    out = _answered_calls(sv, asked)
    position, free = _match_requests(sv, asked, out)
    for i in free:
        tc = asked[i]
        out.append(
            _result(
                tool_call_id=_str(tc.get("id")),
                name=_str(tc.get("name")) or "?",
                arguments=tc.get("arguments"),
                recorded=False,
                error=UNRECORDED_CALL,
                ok=False,
                event=None,
            )
        )
        position.append(i)
    order = sorted(range(len(out)), key=lambda k: position[k])
    return [out[k] for k in order]


def _answered_calls(sv: StepView, asked: list[dict[str, Any]]) -> list[ToolResult]:
    """The results the step's events record: its `tool_call` events, then our `error` events that
    answer a call (an unknown tool)."""
    name_of = {tc.get("id"): _str(tc.get("name")) for tc in asked if isinstance(tc.get("id"), str)}
    out: list[ToolResult] = []
    for ev in sv.tool_calls:
        rec, md = _dict(ev.tool_call), ev.metadata
        call_id = _str(md.get("tool_call_id"))
        error = _error_text(rec.get("error"))
        out.append(
            _result(
                tool_call_id=call_id,
                name=_str(rec.get("name")) or name_of.get(call_id) or "?",
                arguments=md.get("arguments"),
                result=md.get("result"),
                recorded="result" in md,
                error=error,
                error_category=_str(rec.get("error_category")),
                duration_ms=int_or_none(rec.get("duration_ms")),
                side_effect=_str(rec.get("side_effect")),
                args_digest=_str(rec.get("args_digest")),
                result_digest=_str(rec.get("result_digest")),
                ok=error is None,
                event="tool_call",
            )
        )
    for ev in sv.errors:
        md = ev.metadata
        call_id = _str(md.get("tool_call_id"))
        if call_id is None:
            continue  # a provider failure, not the answer to a tool call
        result = md.get("result")
        if result is None:
            result = md.get("message") or md.get("error")
        out.append(
            _result(
                tool_call_id=call_id,
                name=name_of.get(call_id) or _str(md.get("tool_name")) or "?",
                arguments=next((tc.get("arguments") for tc in asked if tc.get("id") == call_id), None),
                result=result,
                recorded=True,
                error=_str(md.get("error")) or "error",
                error_category=_str(md.get("error_category")),
                ok=False,
                event="error",
            )
        )
    return out


def _match_requests(
    sv: StepView, asked: list[dict[str, Any]], out: list[ToolResult]
) -> tuple[list[int], list[int]]:
    """Each result's position among the calls the model `asked` for (`len(asked)` when none), and the
    positions no tool, primitive or error event answers. Ours match by `tool_call_id`, arcana-agent
    1.2's by name, in order."""
    ours = sv.turn_event.is_ours if sv.turn_event is not None else any(ne.event.is_ours for ne in sv.events)
    position: list[int] = []
    free = list(range(len(asked)))
    if ours:
        index_of = {tc.get("id"): i for i, tc in enumerate(asked)}
        for r in out:
            i = index_of.get(r["tool_call_id"])
            position.append(len(asked) if i is None else i)
            if i is not None and i in free:
                free.remove(i)
        answered = {_str(ev.metadata.get("tool_call_id")) for ev in sv.primitive_calls}
        free = [i for i in free if asked[i].get("id") not in answered]
    else:
        for r in out:
            i = next((i for i in free if _str(asked[i].get("name")) == r["name"]), None)
            position.append(len(asked) if i is None else i)
            if i is not None:
                free.remove(i)
        for ev in sv.primitive_calls:
            name = _str(ev.metadata.get("primitive"))
            i = next((i for i in free if _str(asked[i].get("name")) == name), None)
            if i is not None:
                free.remove(i)
    return position, free


def unrecorded_calls(sv: StepView) -> list[str]:
    """Names of the tool calls the step's model asked for that left no event (see `tool_results`)."""
    return [r["name"] for r in tool_results(sv) if r["event"] is None]


def tool_event_outcome(ev: TraceEvent) -> tuple[str, str, bool]:
    """(name, "12ms  error: …", ok) of one `tool_call` event, for one-line displays."""
    rec = _dict(ev.tool_call)
    name = str(rec.get("name") or "?")
    dur = rec.get("duration_ms")
    text = f"{_count(dur)}ms" if dur is not None else ""
    err = _error_text(rec.get("error"))
    if err:
        return name, (text + "  error: " + err).strip(), False
    return name, text, True


# --------------------------------------------------------------------------------------------------
# Context decisions


@dataclass(frozen=True)
class DecisionCounts:
    """What a context decision did, counted from its per-message rows (pinned blocks apart).

    `listed` is False when the decision lists no message rows; `compressed_count` is then the
    producer's own count (arcana-agent 1.2 counts dropped messages in it too)."""

    kept: int = 0
    compressed: int = 0
    dropped: int = 0
    summarized: int = 0
    pinned: int = 0
    listed: bool = False
    compressed_count: int = 0

    @property
    def changed(self) -> str:
        """ "8 compressed", "3 compressed, 1 dropped", "0 compressed" when all were kept."""
        if not self.listed:
            return f"{self.compressed_count} compressed"
        parts = [
            f"{n} {word}"
            for word, n in (
                ("compressed", self.compressed),
                ("summarized", self.summarized),
                ("dropped", self.dropped),
            )
            if n
        ]
        return ", ".join(parts) or "0 compressed"


def decision_counts(decision: Any, metadata: Any = None) -> DecisionCounts:
    """Count a `context_decision` payload (`metadata.context_decision`); `metadata` is the event's
    metadata, whose top-level `compressed_count` is the fallback for the producer's count."""
    d = _dict(decision)
    rows = [r for r in _list(d.get("decisions")) if isinstance(r, dict)]
    counts = {"kept": 0, "compressed": 0, "dropped": 0, "summarized": 0, "pinned": 0}
    for r in rows:
        if is_pinned_row(r):
            counts["pinned"] += 1
        elif r.get("outcome") in counts:
            counts[str(r["outcome"])] += 1
    producer = int_or_none(d.get("compressed_count"))
    if producer is None:
        producer = int_or_none(_dict(metadata).get("compressed_count")) or 0
    return DecisionCounts(listed=bool(rows), compressed_count=producer, **counts)
