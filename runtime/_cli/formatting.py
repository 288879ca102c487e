"""Terminal wording shared by the commands: tolerant accessors over event metadata, primitive
calls, tool outcomes and pinned blocks."""

from __future__ import annotations

import json
from datetime import UTC
from typing import Any

from .._trace import TraceEvent
from ..facts import (
    ARCANA_PRODUCER,
    UNRECORDED_CALL,
    NormalizedEvent,
    PinLifetime,
    StepView,
    as_dict,
    as_list,
    decision_counts,
    decision_rows,
    error_message,
    event_primitive_outcome,
    pinned_blocks,
    step_model,
    tool_event_outcome,
    unrecorded_calls,
)

# Re-exported for the commands: the facts' own wording of a call no event answers.
__all__ = [
    "UNRECORDED_CALL",
    "as_dict",
    "as_list",
    "as_num",
    "changed",
    "decision",
    "decision_row_compact",
    "event_detail",
    "is_arcana",
    "message_text",
    "pin_line",
    "report",
    "snapshot_of",
    "step_model",
    "tool_names",
    "tool_outcome",
    "ts",
    "unrecorded_calls",
    "where",
]

PREVIEW = 110  # columns of a message preview
SNAPSHOT_HINT = (
    "No prompt snapshot recorded. Enable it with RuntimeConfig(trace_include_prompt_snapshots=True)."
)
ARCANA_SNAPSHOT_HINT = (
    "No prompt snapshot recorded (arcana-agent 1.2 writes one with dev_mode=True or "
    "RuntimeConfig(trace_include_prompt_snapshots=True))."
)

# --------------------------------------------------------------------------------------------------
# Small accessors over event metadata (all tolerant of missing or odd values)


as_dict, as_list = as_dict, as_list


def decision(ev: TraceEvent | None) -> dict[str, Any]:
    return as_dict(ev.metadata.get("context_decision")) if ev is not None else {}


def report(ev: TraceEvent | None) -> dict[str, Any]:
    return as_dict(ev.metadata.get("context_report")) if ev is not None else {}


def snapshot_of(ev: TraceEvent | None) -> dict[str, Any]:
    return as_dict(ev.metadata.get("prompt_snapshot")) if ev is not None else {}


def as_num(value: Any, default: str = "?") -> str:
    if isinstance(value, bool) or value is None:
        return default
    if isinstance(value, int | float):
        return str(value)
    return default


def ts(ev: TraceEvent) -> str:
    """The event time in UTC to the minute (`2026-04-18T12:34`), whatever offset the producer wrote."""
    return ev.timestamp_dt.astimezone(UTC).strftime("%Y-%m-%dT%H:%M")


def is_arcana(ne: NormalizedEvent | None) -> bool:
    return ne is not None and ne.producer == ARCANA_PRODUCER


def message_text(msg: dict[str, Any]) -> str:
    content = msg.get("content")
    if isinstance(content, str):
        text = content
    elif content is None:
        text = ""
    else:
        text = json.dumps(content, ensure_ascii=False)
    calls = [c for c in as_list(msg.get("tool_calls")) if isinstance(c, dict)]
    if calls:
        names = []
        for c in calls:
            fn = as_dict(c.get("function"))
            names.append(str(c.get("name") or fn.get("name") or "?"))
        text = (text + " " if text else "") + "→ " + ", ".join(names)
    return text


def tool_names(tools: list[Any]) -> list[str]:
    names = []
    for t in tools:
        t = as_dict(t)
        fn = as_dict(t.get("function"))
        names.append(str(fn.get("name") or t.get("name") or "?"))
    return names


# --------------------------------------------------------------------------------------------------
# Primitive calls


def primitive_line(ev: TraceEvent) -> tuple[str, str, bool]:
    """(primitive, one-line outcome, succeeded) of a `cognitive_primitive` event, in the one wording of
    `runtime.facts.primitive_outcome`."""
    o = event_primitive_outcome(ev)
    return o.primitive, o.summary, o.ok


def tool_outcome(ev: TraceEvent) -> tuple[str, str, bool]:
    return tool_event_outcome(ev)


def changed(ev: TraceEvent | None) -> str:
    """What a context decision did to the history ("8 compressed", "3 compressed, 1 dropped")."""
    if ev is None:
        return "? compressed"
    return decision_counts(ev.metadata.get("context_decision"), ev.metadata).changed


def event_detail(ev: TraceEvent) -> str:
    md = ev.metadata
    kind = ev.event_type
    if kind == "cognitive_primitive":
        prim, text, _ = primitive_line(ev)
        return f"{prim:<9} {text}"
    if kind == "context_decision":
        cd = decision(ev)
        return (
            f"{cd.get('strategy', '?')}  {as_num(cd.get('messages_in', md.get('messages_in')))} → "
            f"{as_num(cd.get('messages_out', md.get('messages_out')))} messages ({changed(ev)})"
        )
    if kind == "prompt_snapshot":
        ps = snapshot_of(ev)
        return f"{len(as_list(ps.get('messages')))} messages, {len(as_list(ps.get('tools')))} tools  model={ps.get('model') or ev.model or '?'}"
    if kind == "turn":
        facts = as_dict(md.get("facts"))
        calls = [as_dict(c).get("name", "?") for c in as_list(facts.get("tool_calls"))]
        finish = facts.get("finish_reason") or "?"
        if calls:
            return f"{finish}  → {', '.join(str(c) for c in calls)}"
        chars = facts.get("assistant_text_chars")
        if chars is None and isinstance(facts.get("assistant_text"), str):
            chars = len(facts["assistant_text"])
        return f"{finish}  {as_num(chars)} chars"
    if kind == "llm_call":
        usage = as_dict(md.get("usage"))
        parts = [str(md.get("purpose") or "llm call")]
        if md.get("provider"):
            parts.append(f"provider={md['provider']}")
        parts.append(f"model={ev.model or '?'}")
        if usage:
            parts.append(
                f"tokens {as_num(usage.get('prompt_tokens'))}+{as_num(usage.get('completion_tokens'))}"
            )
        lat = md.get("latency_ms", ev.llm_latency_ms)
        if lat is not None:
            parts.append(f"{as_num(lat)}ms")
        return "  ".join(parts)
    if kind == "tool_call":
        name, text, ok = tool_outcome(ev)
        return f"{name} {'✓' if ok else '✗'} {text}".rstrip()
    if kind == "error":
        return error_message(ev)
    if kind == "history_seeded":
        return f"seeded {as_num(md.get('seed_count'))} messages"
    return ""


def where(ne: NormalizedEvent, with_agent: bool) -> str:
    bits = []
    if ne.turn is not None:
        # "turn 1.2" left readers guessing; steps after the first are spelled out.
        bits.append(f"turn {ne.turn}" + (f" step {ne.step}" if ne.step and ne.step != 1 else ""))
    if with_agent and ne.agent:
        bits.append(f"agent {ne.agent}")
    return f"  ({', '.join(bits)})" if bits else ""


# --------------------------------------------------------------------------------------------------
# Pinned blocks of a step


def pin_blocks(sv: StepView, pins: list[PinLifetime], *, arcana: bool) -> list[dict[str, Any]]:
    """The pinned blocks of a step's working set, located and named by `runtime.facts.pinned_blocks`."""
    snapshot = snapshot_of(sv.prompt_snapshot).get("messages")
    blocks = pinned_blocks(
        decision_rows(sv.context_decision), pins, sv.turn, arcana=arcana, snapshot_messages=snapshot
    )
    return [b.to_dict() for b in blocks]


def pin_line(b: dict[str, Any]) -> str:
    text = f"[PIN] [{as_num(b['index'])}] {b['role']} {as_num(b['tokens'])} tokens ({b['outcome']} at {b['fidelity']})"
    if b["pin_id"]:
        text += f"  {b['pin_id']}"
        if b["label"] is not None:
            text += f" label={b['label']!r}"
    if b["located"] != "written":
        # arcana-agent 1.2 writes a synthetic index; `index` is where the block really was.
        text += f"  (written as [{as_num(b['raw_index'])}] by arcana-agent 1.2)"
    return text


def decision_row_compact(d: dict[str, Any]) -> str:
    line = (
        f"[{as_num(d.get('index')):>3}] {str(d.get('role') or '?'):<9} {str(d.get('outcome') or '?'):<10} "
        f"{as_num(d.get('token_count_before')):>5}→{as_num(d.get('token_count_after')):<5} {d.get('reason') or ''}"
    )
    if d.get("fidelity") and d.get("outcome") == "compressed":
        line += f" [{d['fidelity']}]"
    score = d.get("relevance_score")
    if isinstance(score, int | float) and not isinstance(score, bool):
        line += f" score={score:.2f}"
    return line
